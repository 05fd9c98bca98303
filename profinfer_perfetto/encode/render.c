/* Pieces.render's copy loop (encode/wire.py), compiled: one piece's bytes onto its rows.
 * Built by scripts/setup.sh into _render.so beside this file and loaded with ctypes over numpy
 * buffers (encode/native.py); wire.py copies with numpy where it is absent. */
#include <stdint.h>
#include <string.h>

/* The version of the functions below and their arguments, which native.py checks: a library
 * built from an older render.c (setup.sh not run since) is not used. */
int render_abi(void)
{
    return 1;
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

static int64_t varint_size(uint64_t v)
{
    int64_t n = 1;
    while (v >= 0x80) {
        v >>= 7;
        n++;
    }
    return n;
}

/* Writes (or with out NULL, only counts) a varint; returns its size. */
static int64_t put_varint(uint8_t *out, uint64_t v)
{
    int64_t n = 0;
    while (v >= 0x80) {
        if (out)
            out[n] = (uint8_t)(v | 0x80);
        v >>= 7;
        n++;
    }
    if (out)
        out[n] = (uint8_t)v;
    return n + 1;
}

static int64_t put_bytes(uint8_t *out, const uint8_t *from, int64_t size)
{
    if (out)
        memcpy(out, from, (size_t)size);
    return size;
}

/* The tags render_packets writes, by their index in `tag_end`. */
enum { PACKET, TIMESTAMP, TRACK_EVENT, ANNOTATION, DOUBLE_COUNTER, EXTRA_TRACK, EXTRA_VALUE };

struct packets {
    int64_t counters;
    const uint8_t *tags;
    const int64_t *tag_end;
    const int64_t *delta;                   /* timestamp delta */
    const uint8_t *source[4];               /* sequence head, body, flow ids, terminating ones */
    const int64_t *start[4], *size[4];      /* per row, in source[k] */
    const uint8_t *prefix;                  /* each counter's annotation prefix, back to back */
    const int64_t *prefix_end;
    const int64_t *count;                   /* rows x counters: annotation value, -1: none */
    const uint8_t *is_counter;
    const double *value;                    /* a counter event's value */
    const int64_t *track;                   /* rows x counters: extra track uuid, -1: none */
    const uint8_t *sampled;                 /* rows x counters: an extra counter value */
    const int64_t *sample;
};

static int64_t put_tag(const struct packets *p, uint8_t *out, int which)
{
    int64_t begin = which ? p->tag_end[which - 1] : 0;
    return put_bytes(out, p->tags + begin, p->tag_end[which] - begin);
}

static int64_t put_range(const struct packets *p, uint8_t *out, int k, int64_t row)
{
    return put_bytes(out, p->source[k] + p->start[k][row], p->size[k][row]);
}

/* A row's TrackEvent fields (with out NULL: their size). */
static int64_t track_event(const struct packets *p, uint8_t *out, int64_t row)
{
    int64_t n = put_range(p, out, 1, row), c, at = row * p->counters;
#define OUT (out ? out + n : NULL)
    for (c = 0; c < p->counters; c++) {
        int64_t begin = c ? p->prefix_end[c - 1] : 0, size = p->prefix_end[c] - begin;
        uint64_t v = (uint64_t)p->count[at + c];
        if (p->count[at + c] < 0)
            continue;
        n += put_tag(p, OUT, ANNOTATION);
        n += put_varint(OUT, (uint64_t)(size + varint_size(v)));
        n += put_bytes(OUT, p->prefix + begin, size);
        n += put_varint(OUT, v);
    }
    if (p->is_counter[row]) {
        n += put_tag(p, OUT, DOUBLE_COUNTER);
        n += put_bytes(OUT, (const uint8_t *)&p->value[row], 8);
    }
    n += put_range(p, OUT, 2, row);
    n += put_range(p, OUT, 3, row);
    for (c = 0; c < p->counters; c++)
        if (p->track[at + c] >= 0) {
            n += put_tag(p, OUT, EXTRA_TRACK);
            n += put_varint(OUT, (uint64_t)p->track[at + c]);
        }
    for (c = 0; c < p->counters; c++)
        if (p->sampled[at + c]) {
            n += put_tag(p, OUT, EXTRA_VALUE);
            n += put_varint(OUT, (uint64_t)p->sample[at + c]);
        }
    return n;
}

/* A row's packet, as encode/perfetto.py's _Events.pieces renders it: Trace.packet tag and
 * size, timestamp, sequence head, TrackEvent tag and size (`event`), the event. With out NULL
 * only its size; else written where it fits in `room` bytes (-1 where it does not). */
static int64_t packet(const struct packets *p, uint8_t *out, int64_t room, int64_t row,
                      int64_t event)
{
    int64_t inner = p->tag_end[TIMESTAMP] - p->tag_end[PACKET]
        + varint_size((uint64_t)p->delta[row]) + p->size[0][row]
        + p->tag_end[TRACK_EVENT] - p->tag_end[TIMESTAMP] + varint_size((uint64_t)event) + event;
    int64_t n = p->tag_end[PACKET] + varint_size((uint64_t)inner);
    if (!out)
        return n + inner;
    if (n + inner > room)
        return -1;
    n = put_tag(p, out, PACKET);
    n += put_varint(OUT, (uint64_t)inner);
    n += put_tag(p, OUT, TIMESTAMP);
    n += put_varint(OUT, (uint64_t)p->delta[row]);
    n += put_range(p, OUT, 0, row);
    n += put_tag(p, OUT, TRACK_EVENT);
    n += put_varint(OUT, (uint64_t)event);
    return n + track_event(p, OUT, row);
#undef OUT
}

/* The packets of `rows` rows back to back: with out NULL, their size, each row's event size
 * kept in `event` (rows of int64) for the call that writes them into out (out_size bytes);
 * that call returns the size written, or -1 (nothing more written) where they would not fit.
 * The caller checks that each range lies in its source. */
int64_t render_packets(uint8_t *out, int64_t out_size, int64_t rows, const struct packets *p,
                       int64_t *event)
{
    int64_t n = 0, size;
    for (int64_t row = 0; row < rows; row++) {
        if (!out)
            event[row] = track_event(p, NULL, row);
        size = packet(p, out ? out + n : NULL, out_size - n, row, event[row]);
        if (size < 0)
            return -1;
        n += size;
    }
    return n;
}
