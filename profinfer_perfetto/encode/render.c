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
    return 2;
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

enum { FITS, FULL, BAD };

/* Where the next bytes go, up to `end`; `failed`: FULL where they did not fit, BAD where an
 * entry lies outside its table (nothing more is written after either). */
struct writer {
    uint8_t *at, *end;
    int failed;
};

static inline void put(struct writer *w, const uint8_t *from, int64_t size)
{
    if (w->failed)
        return;
    if (size > w->end - w->at) {
        w->failed = FULL;
        return;
    }
    if (size > 16) {
        memcpy(w->at, from, (size_t)size);
        w->at += size;
        return;
    }
    for (int64_t i = 0; i < size; i++)  /* a tag, a varint: shorter than a call to memcpy */
        *w->at++ = from[i];
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

static inline void put_varint(struct writer *w, uint64_t v)
{
    uint8_t bytes[10];
    int64_t n = 0;
    while (v >= 0x80) {
        bytes[n++] = (uint8_t)(v | 0x80);
        v >>= 7;
    }
    bytes[n++] = (uint8_t)v;
    put(w, bytes, n);
}

/* Entry i of a table: its size, or -1 where it lies outside the table or its buffer. */
static inline int64_t entry_size(const struct strings *s, int64_t i)
{
    if (i < 0 || i >= s->count)
        return -1;
    int64_t from = s->start[i], size = s->size[i];
    return from < 0 || size < 0 || from > s->bytes_size - size ? -1 : size;
}

static inline void put_entry(struct writer *w, const struct strings *s, int64_t i)
{
    if (entry_size(s, i) < 0)
        w->failed = w->failed ? w->failed : BAD;
    else
        put(w, s->bytes + s->start[i], s->size[i]);
}

/* A debug annotation: counter c's name and value tag (its `prefix` entry), then `v`. */
static void annotation(struct writer *w, const struct events *e, int64_t c, uint64_t v)
{
    put_entry(w, &e->tags, ANNOTATION);
    put_varint(w, (uint64_t)(entry_size(&e->prefix, c) + varint_size(v)));
    put_entry(w, &e->prefix, c);
    put_varint(w, v);
}

/* The extra counter tracks and values of a row: a value where `sampled`; the tracks named
 * where the row leaves out the value of one of its tracks. */
static void extra_counters(struct writer *w, const struct events *e, int64_t row)
{
    const int64_t *track = e->counter_track + row * e->counters;
    const uint8_t *sampled = e->sampled + row * e->counters;
    int64_t c, named = 0;
    for (c = 0; c < e->counters; c++)
        named |= track[c] >= 0 && !sampled[c];
    for (c = 0; named && c < e->counters; c++)
        if (sampled[c]) {
            if (track[c] < 0 || track[c] >= e->tracks)
                w->failed = w->failed ? w->failed : BAD;
            put_entry(w, &e->tags, EXTRA_TRACK);
            put_varint(w, w->failed ? 0 : (uint64_t)e->uuid[track[c]]);
        }
    for (c = 0; c < e->counters; c++)
        if (sampled[c]) {
            put_entry(w, &e->tags, EXTRA_VALUE);
            put_varint(w, (uint64_t)e->counter_value[row * e->counters + c]);
        }
}

/* A row's TrackEvent fields, in the order of _Events.pieces. */
static void track_event(struct writer *w, const struct events *e, int64_t row, int64_t track)
{
    int64_t args = e->args[row], c;
    put_entry(w, &e->tags, TYPE);
    put_varint(w, (uint64_t)e->type[row]);
    if (e->own[track]) {
        put_entry(w, &e->tags, TRACK_UUID);
        put_varint(w, (uint64_t)e->uuid[track]);
    }
    if (e->name[row] >= 0) {
        put_entry(w, &e->tags, NAME_IID);
        put_varint(w, (uint64_t)e->name[row] + 1);
    }
    if (args >= 0)
        put_entry(w, &e->arg_sets, args);
    put_entry(w, &e->desc, row);
    for (c = 0; args >= 0 && c < e->counters; c++)
        if (e->count[row * e->counters + c] >= 0)
            annotation(w, e, c, (uint64_t)e->count[row * e->counters + c]);
    if (e->type[row] == e->counter_type) {
        put_entry(w, &e->tags, DOUBLE_COUNTER);
        put(w, (const uint8_t *)&e->value[row], 8);
    }
    for (int k = 0; k < 2; k++)
        for (c = row ? e->flow_end[k][row - 1] : 0; c < e->flow_end[k][row]; c++) {
            put_entry(w, &e->tags, FLOW_ID + k);
            put(w, (const uint8_t *)&e->flow_id[k][c], 8);
        }
    extra_counters(w, e, row);
}

/* A row's packet: Trace.packet tag and size, timestamp (the delta from its sequence's last
 * packet, which moves on), the sequence's head, TrackEvent tag and size, the event. The event
 * is written first, after room for a head whose sizes take a byte each, and moved where they
 * take more. */
static void packet(struct writer *w, const struct events *e, int64_t row)
{
    int64_t track = row >= 0 && row < e->rows ? e->track[row] : -1;
    int64_t seq = track >= 0 && track < e->tracks ? e->seq[track] : -1;
    int64_t head = entry_size(&e->head, seq), delta = seq < 0 ? 0 : e->ts[row] - e->last[seq];
    int64_t after_size = entry_size(&e->tags, TIMESTAMP) + varint_size((uint64_t)delta) + head
        + entry_size(&e->tags, TRACK_EVENT), before = entry_size(&e->tags, PACKET);
    if (head < 0 || after_size < head || before < 0) {
        w->failed = w->failed ? w->failed : BAD;
        return;
    }
    uint8_t *start = w->at;
    if (w->failed || w->end - start < before + after_size + 2) {
        w->failed = w->failed ? w->failed : FULL;
        return;
    }
    struct writer event = {start + before + after_size + 2, w->end, FITS};
    track_event(&event, e, row, track);
    int64_t size = event.at - (start + before + after_size + 2);
    int64_t inner = after_size + varint_size((uint64_t)size) + size;
    int64_t shift = varint_size((uint64_t)size) + varint_size((uint64_t)inner) - 2;
    if (!event.failed && shift && w->end - event.at < shift)
        event.failed = FULL;
    if (event.failed) {
        w->failed = event.failed;
        return;
    }
    if (shift)
        memmove(start + before + after_size + 2 + shift, start + before + after_size + 2,
                (size_t)size);
    struct writer h = {start, w->end, FITS};
    put_entry(&h, &e->tags, PACKET);
    put_varint(&h, (uint64_t)inner);
    put_entry(&h, &e->tags, TIMESTAMP);
    put_varint(&h, (uint64_t)delta);
    put_entry(&h, &e->head, seq);
    put_entry(&h, &e->tags, TRACK_EVENT);
    put_varint(&h, (uint64_t)size);
    w->at = h.at + size;
    e->last[seq] = e->ts[row];
}

/* The packets of the layout rows `rows` (count of them) back to back into out (out_size bytes):
 * returns their size, -1 where they do not fit (`last` then holds the sequences' times up to
 * the first row that did not), or -2 where an entry lies outside its table. */
int64_t render_events(uint8_t *out, int64_t out_size, const int64_t *rows, int64_t count,
                      const struct events *e)
{
    struct writer w = {out, out + out_size, FITS};
    for (int64_t i = 0; i < count && !w.failed; i++)
        packet(&w, e, rows[i]);
    return w.failed ? -w.failed : w.at - out;
}
