/* Pieces.render's copy loop (encode/wire.py), compiled: one piece's bytes onto its rows.
 * Built by scripts/setup.sh into _render.so beside this file and loaded with ctypes over numpy
 * buffers (encode/native.py); wire.py copies with numpy where it is absent. */
#include <stdint.h>
#include <string.h>

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
