/* The model's passes in C where numpy's take many (model/native.py loads this as _passes.so,
   which the install builds: scripts/hatch_build.py). Each has a numpy twin in the model that
   gives the same result where the library is absent, and a test holds them equal. */

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int64_t passes_abi(void) { return 3; }

/* Where a record's fields lie: NODE records (capture/events.py) back to back. */
struct node_fields {
    int64_t size, ptr, view_src, src, src_size, slots, src_ptr, src_view;
};

static uint64_t field(const uint8_t *record, int64_t at) {
    uint64_t value;
    memcpy(&value, record + at, sizeof value);
    return value;
}

static uint64_t slot_of(uint64_t key, uint64_t mask) {
    return (key * 0x9E3779B97F4A7C15ull) >> 17 & mask;
}

/* The producer of each source of n nodes (in graph order): for each node i and each source
   slot s whose tensor address is not 0, in that order, the last node j < i whose storage (its
   view's source, else its own address) is what the source reads (its view's source, else its
   address), -1 where no earlier node wrote it: reader[k] = i, slot[k] = s, producer[k] = j.
   Returns k, the sources found; -1 where memory ran out. */
int64_t last_writers(const uint8_t *nodes, int64_t n, const struct node_fields *f,
                     int64_t *reader, int64_t *slot, int64_t *producer) {
    int64_t size = 16, found = 0;
    while (size < 2 * n) size <<= 1;
    uint64_t *keys = malloc(size * sizeof *keys);
    int64_t *last = malloc(size * sizeof *last);
    if (keys == NULL || last == NULL) {
        free(keys);
        free(last);
        return -1;
    }
    for (int64_t k = 0; k < size; k++) last[k] = -1;
    uint64_t mask = (uint64_t)size - 1;
    for (int64_t i = 0; i < n; i++) {
        const uint8_t *node = nodes + i * f->size;
        for (int64_t s = 0; s < f->slots; s++) {
            const uint8_t *src = node + f->src + s * f->src_size;
            uint64_t ptr = field(src, f->src_ptr), view = field(src, f->src_view);
            if (ptr == 0) continue;
            uint64_t read = view != 0 ? view : ptr, k = slot_of(read, mask);
            while (last[k] >= 0 && keys[k] != read) k = (k + 1) & mask;
            reader[found] = i;
            slot[found] = s;
            producer[found++] = last[k];
        }
        uint64_t view = field(node, f->view_src), storage = view != 0 ? view : field(node, f->ptr);
        uint64_t k = slot_of(storage, mask);
        while (last[k] >= 0 && keys[k] != storage) k = (k + 1) & mask;
        keys[k] = storage;
        last[k] = i;
    }
    free(keys);
    free(last);
    return found;
}

/* For each of m queries (a graph, a tensor address), the last of the n nodes (the highest
   index) that graph computed into that address, -1 for none: found[k]. Returns 0, or -1 where
   memory ran out. */
int64_t node_index(int64_t n, const int64_t *graph, const uint64_t *ptr, int64_t m,
                   const int64_t *q_graph, const uint64_t *q_ptr, int64_t *found) {
    int64_t size = 16;
    while (size < 2 * n) size <<= 1;
    int64_t *node = malloc(size * sizeof *node);
    if (node == NULL) return -1;
    for (int64_t k = 0; k < size; k++) node[k] = -1;
    uint64_t mask = (uint64_t)size - 1;
    for (int64_t i = 0; i < n; i++) {
        uint64_t k = slot_of(ptr[i] ^ (uint64_t)graph[i] * 0xC2B2AE3D27D4EB4Full, mask);
        while (node[k] >= 0 && (ptr[node[k]] != ptr[i] || graph[node[k]] != graph[i]))
            k = (k + 1) & mask;
        node[k] = i;
    }
    for (int64_t j = 0; j < m; j++) {
        uint64_t k = slot_of(q_ptr[j] ^ (uint64_t)q_graph[j] * 0xC2B2AE3D27D4EB4Full, mask);
        while (node[k] >= 0 && (ptr[node[k]] != q_ptr[j] || graph[node[k]] != q_graph[j]))
            k = (k + 1) & mask;
        found[j] = node[k];
    }
    free(node);
    return 0;
}

/* Ops from n work rows (op begins and barriers, by thread and time; `graph`: each one's graph,
   `graph_end`: each graph's end): per op begin k, in row order, its row, the row of its
   thread's last barrier in its graph before its thread's next op (-1: none), its end (the
   thread's next op begin in the graph, or the graph's end, at most the graph's end) and the
   end of its work (that barrier, else its end, at most its end). Returns the ops. */
int64_t op_spans(int64_t n, const uint32_t *tid, const uint64_t *ts, const uint8_t *begins,
                 const int64_t *graph, const uint64_t *graph_end, int64_t *row,
                 int64_t *last_barrier, uint64_t *end, uint64_t *work_end) {
    int64_t ops = 0;
    for (int64_t r = 0; r < n; r++) {
        if (begins[r]) {
            row[ops] = r;
            last_barrier[ops++] = -1;
        } else if (ops > 0 && tid[r] == tid[row[ops - 1]] && graph[r] == graph[row[ops - 1]]) {
            last_barrier[ops - 1] = r;
        }
    }
    for (int64_t k = 0; k < ops; k++) {
        int64_t r = row[k], next = k + 1 < ops ? row[k + 1] : -1;
        uint64_t limit = graph_end[graph[r]], e = limit;
        if (next >= 0 && tid[next] == tid[r] && graph[next] == graph[r] && ts[next] < limit)
            e = ts[next];
        uint64_t w = last_barrier[k] >= 0 ? ts[last_barrier[k]] : e;
        end[k] = e;
        work_end[k] = w < e ? w : e;
    }
    return ops;
}
