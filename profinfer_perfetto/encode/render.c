/* The trace's event packets (encode/perfetto.py's _Events), compiled: a chunk's packets in one
 * pass over its rows; and Pieces.render's copy loop (encode/wire.py). Built by
 * scripts/setup.sh into _render.so beside this file and loaded with ctypes over numpy buffers
 * (encode/native.py); numpy renders the same bytes where it is absent. */
#include <stdint.h>
#include <string.h>

/* The version of the functions below and their arguments, which native.py checks: a library
 * built from an older render.c (setup.sh not run since) is not used. */
int render_abi(void)
{
    return 5;
}

/* Row i of the piece (row at[i] of the output, or i where at is NULL) gets
 * source[start[i * start_step] : + length[i * length_step]] at out[next[row]], and next[row]
 * moves past it. Returns 0, or -1 (nothing more copied) where a copy would leave out or
 * source. */
int render_piece(uint8_t *out, int64_t out_size, int64_t *next, const uint8_t *source,
                 int64_t source_size, const int64_t *at, int64_t rows, const int64_t *start,
                 int64_t start_step, const int64_t *length, int64_t length_step)
{
    for (int64_t i = 0; i < rows; i++) {
        int64_t row = at ? at[i] : i;
        int64_t from = start[i * start_step], size = length[i * length_step];
        int64_t to = next[row];
        if (size < 0 || from < 0 || to < 0 || from > source_size - size || to > out_size - size)
            return -1;
        memcpy(out + to, source + from, (size_t)size);
        next[row] = to + size;
    }
    return 0;
}

/* Which counter samples to write, as encode/perfetto.py's _changes picks them: sampled[i] (of
 * rows x counters) where track[i] >= 0, value[i] is not 0 and the sample before on the same
 * track and column (in row order) is not value[i] or there is none. `last` and `seen` (tracks x
 * counters) start zeroed. Returns 0, or -1 where a track lies outside 0 to tracks - 1. */
int render_changes(uint8_t *sampled, const int64_t *track, const int64_t *value, int64_t rows,
                   int64_t counters, int64_t tracks, int64_t *last, uint8_t *seen)
{
    for (int64_t i = 0; i < rows * counters; i++) {
        int64_t t = track[i], c = i % counters;
        sampled[i] = 0;
        if (t < 0)
            continue;
        if (t >= tracks)
            return -1;
        int64_t k = t * counters + c;
        sampled[i] = value[i] != 0 && (!seen[k] || last[k] != value[i]);
        seen[k] = 1;
        last[k] = value[i];
    }
    return 0;
}

/* The flows of each row, as encode/perfetto.py's _flow_table orders them: flow i (of `flows`)
 * has id ids[i] and is at row at[i]; end[row] (of `rows`) becomes the end of the row's ids in
 * `sorted`, each row's ids in order. Returns 0, or -1 where a row lies outside 0 to rows - 1. */
int render_flows(int64_t *end, int64_t *sorted, const int64_t *ids, const int64_t *at,
                 int64_t flows, int64_t rows)
{
    int64_t i, j, row, total = 0;
    memset(end, 0, (size_t)rows * sizeof *end);
    for (i = 0; i < flows; i++) {
        if (at[i] < 0 || at[i] >= rows)
            return -1;
        end[at[i]]++;
    }
    for (row = 0; row < rows; row++) {  /* each row's start, where its first id goes */
        int64_t count = end[row];
        end[row] = total;
        total += count;
    }
    for (i = 0; i < flows; i++)
        sorted[end[at[i]]++] = ids[i];
    for (row = 0, i = 0; row < rows; i = end[row++])  /* a row's few ids, by insertion */
        for (j = i + 1; j < end[row]; j++) {
            int64_t id = sorted[j], k = j;
            for (; k > i && sorted[k - 1] > id; k--)
                sorted[k] = sorted[k - 1];
            sorted[k] = id;
        }
    return 0;
}

/* Byte strings in one buffer: entry i is bytes[start[i] : start[i] + size[i]]. */
struct strings {
    const uint8_t *bytes;
    int64_t bytes_size, count;
    const int64_t *start, *size;
};

/* The tags render_events writes, by their entry in `tags`. */
enum { PACKET, TIMESTAMP, TRACK_EVENT, TYPE, TRACK_UUID, NAME_IID, ANNOTATION, DOUBLE_COUNTER,
       FLOW_ID, TERMINATING_FLOW_ID, EXTRA_TRACK, EXTRA_VALUE };

/* A layout's events, as encode/native.py's Tables describes them. */
struct events {
    int64_t rows, counters, counter_type;
    struct strings tags, prefix;            /* prefix: each counter's annotation name, value tag */
    const int64_t *ts, *track, *name, *args; /* by row */
    const int8_t *type;
    const double *value;
    struct strings desc;                    /* by row */
    const int64_t *flow_end[2], *flow_id[2]; /* flow ids, terminating ones: render_flows' */
    const int64_t *count, *counter_track, *counter_value; /* rows x counters */
    const uint8_t *sampled;
    int64_t tracks;
    const int64_t *seq, *uuid;              /* by track */
    const uint8_t *own;                     /* by track: not its sequence's default track */
    struct strings head;                    /* by sequence: what a packet holds after its time */
    int64_t *last;                          /* by sequence: the time of its last packet */
    struct strings arg_sets;
};

/* Entry i of a table: its size, or -1 where it lies outside the table or its buffer. */
static inline int64_t entry_size(const struct strings *s, int64_t i)
{
    if (i < 0 || i >= s->count)
        return -1;
    int64_t from = s->start[i], size = s->size[i];
    return from < 0 || size < 0 || from > s->bytes_size - size ? -1 : size;
}

/* The longest entry of a table, or -1 where one lies outside it. */
static int64_t longest(const struct strings *s)
{
    int64_t most = 0;
    for (int64_t i = 0; i < s->count; i++) {
        int64_t size = entry_size(s, i);
        if (size < 0)
            return -1;
        most = size > most ? size : most;
    }
    return most;
}

/* The writers below write where the caller made room (render_events checks it per packet). */
static inline uint8_t *put(uint8_t *at, const uint8_t *from, int64_t size)
{
    if (size > 16)
        return (uint8_t *)memcpy(at, from, (size_t)size) + size;
    for (int64_t i = 0; i < size; i++)  /* a tag, a varint: shorter than a call to memcpy */
        at[i] = from[i];
    return at + size;
}

static inline uint8_t *put_entry(uint8_t *at, const struct strings *s, int64_t i)
{
    return put(at, s->bytes + s->start[i], s->size[i]);
}

static inline uint8_t *put_varint(uint8_t *at, uint64_t v)
{
    while (v >= 0x80) {
        *at++ = (uint8_t)(v | 0x80);
        v >>= 7;
    }
    *at++ = (uint8_t)v;
    return at;
}

static inline int64_t varint_size(uint64_t v)
{
    int64_t n = 1;
    while (v >= 0x80) {
        v >>= 7;
        n++;
    }
    return n;
}

/* A varint field: tag, value. */
static inline uint8_t *put_field(uint8_t *at, const struct events *e, int tag, uint64_t v)
{
    return put_varint(put_entry(at, &e->tags, tag), v);
}

/* The extra counter tracks and values of a row: a value where `sampled`; the tracks named
 * where the row leaves out the value of one of its tracks. */
static uint8_t *extra_counters(uint8_t *at, const struct events *e, int64_t row)
{
    const int64_t *track = e->counter_track + row * e->counters;
    const uint8_t *sampled = e->sampled + row * e->counters;
    int64_t c, named = 0;
    for (c = 0; c < e->counters; c++)
        named |= track[c] >= 0 && !sampled[c];
    for (c = 0; named && c < e->counters; c++)
        if (sampled[c])
            at = put_field(at, e, EXTRA_TRACK, (uint64_t)e->uuid[track[c]]);
    for (c = 0; c < e->counters; c++)
        if (sampled[c])
            at = put_field(at, e, EXTRA_VALUE, (uint64_t)e->counter_value[row * e->counters + c]);
    return at;
}

/* A row's TrackEvent fields, in the order of _Events.pieces. */
static uint8_t *track_event(uint8_t *at, const struct events *e, int64_t row, int64_t track)
{
    int64_t args = e->args[row], c, i, k;
    at = put_field(at, e, TYPE, (uint64_t)e->type[row]);
    if (e->own[track])
        at = put_field(at, e, TRACK_UUID, (uint64_t)e->uuid[track]);
    if (args >= 0)
        at = put_entry(at, &e->arg_sets, args);
    at = put_entry(at, &e->desc, row);
    if (e->name[row] >= 0)
        at = put_field(at, e, NAME_IID, (uint64_t)e->name[row] + 1);
    for (c = 0; args >= 0 && c < e->counters; c++) {
        uint64_t v = (uint64_t)e->count[row * e->counters + c];
        if (e->count[row * e->counters + c] < 0)
            continue;  /* an annotation: the counter's name and value tag, the value */
        at = put_field(at, e, ANNOTATION, (uint64_t)(e->prefix.size[c] + varint_size(v)));
        at = put_varint(put_entry(at, &e->prefix, c), v);
    }
    if (e->type[row] == e->counter_type)
        at = put(put_entry(at, &e->tags, DOUBLE_COUNTER), (const uint8_t *)&e->value[row], 8);
    for (k = 0; k < 2; k++)
        for (i = row ? e->flow_end[k][row - 1] : 0; i < e->flow_end[k][row]; i++)
            at = put_field(at, e, FLOW_ID + k, (uint64_t)e->flow_id[k][i]);
    return extra_counters(at, e, row);
}

/* The most bytes a row's packet takes (`fixed`: what every packet may take beside its head,
 * args, description and flows), or -1 where it refers outside a table. */
static int64_t room(const struct events *e, int64_t row, int64_t fixed, int64_t per_flow)
{
    if (row < 0 || row >= e->rows)
        return -1;
    int64_t track = e->track[row], c;
    int64_t head = track >= 0 && track < e->tracks ? entry_size(&e->head, e->seq[track]) : -1;
    int64_t args = e->args[row] < 0 ? 0 : entry_size(&e->arg_sets, e->args[row]);
    int64_t desc = entry_size(&e->desc, row);
    if (head < 0 || args < 0 || desc < 0)
        return -1;
    for (c = 0; c < e->counters; c++) {
        int64_t t = e->counter_track[row * e->counters + c];
        if (e->sampled[row * e->counters + c] && (t < 0 || t >= e->tracks))
            return -1;
    }
    int64_t flows = e->flow_end[0][row] + e->flow_end[1][row]
        - (row ? e->flow_end[0][row - 1] + e->flow_end[1][row - 1] : 0);
    return fixed + head + args + desc + flows * per_flow;
}

/* A row's packet: Trace.packet tag and size, the sequence's head, TrackEvent tag and size, the
 * event, and last the timestamp (the delta from its sequence's last packet, which moves on;
 * encode/perfetto.py's docstring says why last). The event is written first, after room for
 * sizes that take a byte each, and moved on where they take more. */
static uint8_t *packet(uint8_t *at, const struct events *e, int64_t row)
{
    int64_t track = e->track[row], seq = e->seq[track], delta = e->ts[row] - e->last[seq];
    int64_t head = e->head.size[seq] + e->tags.size[TRACK_EVENT];
    int64_t stamp = e->tags.size[TIMESTAMP] + varint_size((uint64_t)delta);
    uint8_t *event = at + e->tags.size[PACKET] + 1 + head + 1;
    int64_t size = track_event(event, e, row, track) - event;
    int64_t inner = head + varint_size((uint64_t)size) + size + stamp;
    int64_t shift = varint_size((uint64_t)size) + varint_size((uint64_t)inner) - 2;
    if (shift)
        memmove(event + shift, event, (size_t)size);
    at = put_varint(put_entry(at, &e->tags, PACKET), (uint64_t)inner);
    at = put_entry(at, &e->head, seq);
    at = put_field(at, e, TRACK_EVENT, (uint64_t)size);
    e->last[seq] = e->ts[row];
    return put_field(at + size, e, TIMESTAMP, (uint64_t)delta);
}

/* The packets of the layout rows `rows` (count of them) back to back into out (out_size bytes):
 * returns their size, -1 where they do not fit (`last` then holds the sequences' times up to
 * the first row that did not), or -2 where an entry lies outside its table. */
int64_t render_events(uint8_t *out, int64_t out_size, const int64_t *rows, int64_t count,
                      const struct events *e)
{
    int64_t tag = longest(&e->tags), prefix = longest(&e->prefix);
    if (tag < 0 || prefix < 0 || e->tags.count <= EXTRA_VALUE || e->prefix.count < e->counters)
        return -2;
    /* Three varint fields of the head, the event's type, track and name, each counter's
     * annotation (and its size), extra track and value; the double. */
    int64_t field = tag + 10, fixed = 6 * field + e->counters * (4 * field + prefix) + tag + 8;
    uint8_t *at = out;
    for (int64_t i = 0; i < count; i++) {
        int64_t most = room(e, rows[i], fixed, field);
        if (most < 0)
            return -2;
        if (most > out + out_size - at)
            return -1;
        at = packet(at, e, rows[i]);
    }
    return at - out;
}
