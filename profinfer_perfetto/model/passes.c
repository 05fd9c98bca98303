/* The model's passes in C where numpy's take many (model/native.py loads this as _passes.so,
   which the install builds: scripts/hatch_build.py). Each has a numpy twin in the model that
   gives the same result where the library is absent, and a test holds them equal. */

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int64_t passes_abi(void) { return 9; }

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

/* A hash table's slots for n entries (at most half full), all free (-1), and the mask of a
   slot's number; NULL where memory ran out. */
static int64_t *empty_slots(int64_t n, uint64_t *mask) {
    int64_t size = 16;
    while (size < 2 * n) size <<= 1;
    int64_t *slots = malloc(size * sizeof *slots);
    if (slots != NULL)
        for (int64_t k = 0; k < size; k++) slots[k] = -1;
    *mask = (uint64_t)size - 1;
    return slots;
}

static uint64_t key_of(int64_t graph, uint64_t a, uint64_t b) {
    return a ^ (uint64_t)graph * 0xC2B2AE3D27D4EB4Full ^ b * 0x165667B19E3779F9ull;
}

/* The slot of (graph, a, b) among entries whose fields the arrays hold (slots[k]: an entry's
   index, -1: free). */
static uint64_t find(const int64_t *slots, uint64_t mask, const int64_t *graph,
                     const uint64_t *a, const uint32_t *b, int64_t q_graph, uint64_t q_a,
                     uint32_t q_b) {
    uint64_t k = slot_of(key_of(q_graph, q_a, q_b), mask);
    while (slots[k] >= 0 && (graph[slots[k]] != q_graph || (a != NULL && a[slots[k]] != q_a)
                             || (b != NULL && b[slots[k]] != q_b)))
        k = (k + 1) & mask;
    return k;
}

/* The producer of each source of n nodes (in graph order; node i's record is row desc[i] of
   the records at `records`): for each node i and each source slot s whose tensor address is
   not 0, in that order, the last node j < i whose storage (its view's source, else its own
   address) is what the source reads (its view's source, else its address), -1 where no
   earlier node wrote it: reader[k] = i, slot[k] = s, producer[k] = j. Returns k, the sources
   found; -1 where memory ran out. */
int64_t last_writers(const uint8_t *records, const int64_t *desc, int64_t n,
                     const struct node_fields *f, int64_t *reader, int64_t *slot,
                     int64_t *producer) {
    int64_t found = 0;
    uint64_t mask;
    int64_t *last = empty_slots(n, &mask);
    uint64_t *keys = malloc((mask + 1) * sizeof *keys);
    if (keys == NULL || last == NULL) {
        free(keys);
        free(last);
        return -1;
    }
    for (int64_t i = 0; i < n; i++) {
        const uint8_t *node = records + desc[i] * f->size;
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
    uint64_t mask;
    int64_t *node = empty_slots(n, &mask);
    if (node == NULL) return -1;
    for (int64_t i = 0; i < n; i++)
        node[find(node, mask, graph, ptr, NULL, graph[i], ptr[i], 0)] = i;
    for (int64_t j = 0; j < m; j++)
        found[j] = node[find(node, mask, graph, ptr, NULL, q_graph[j], q_ptr[j], 0)];
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

/* op_spans' ends of nk op begins (by thread, then time; `k_graph`: each one's graph) among nb
   barriers (so sorted, in `b_graph`), the two merged as one_trap.work_rows merges them (each
   begin after the barriers of its thread at its time), without the merged rows: end[k] and
   work_end[k]. */
void merged_spans(int64_t nb, const uint32_t *b_tid, const uint64_t *b_ts,
                  const int64_t *b_graph, int64_t nk, const uint32_t *k_tid,
                  const uint64_t *k_ts, const int64_t *k_graph, const uint64_t *graph_end,
                  uint64_t *end, uint64_t *work_end) {
    int64_t i = 0;
    for (int64_t k = 0; k <= nk; k++) {
        /* The barriers before begin k (all that are left after the last): begin k-1's where
           its thread's and graph's; work_end holds its last one's time, end whether any. */
        while (i < nb && (k == nk || b_tid[i] < k_tid[k]
                          || (b_tid[i] == k_tid[k] && b_ts[i] <= k_ts[k]))) {
            if (k > 0 && b_tid[i] == k_tid[k - 1] && b_graph[i] == k_graph[k - 1]) {
                work_end[k - 1] = b_ts[i];
                end[k - 1] = 1;
            }
            i++;
        }
        if (k < nk) end[k] = 0;
    }
    for (int64_t k = 0; k < nk; k++) {
        uint64_t limit = graph_end[k_graph[k]], e = limit;
        if (k + 1 < nk && k_tid[k + 1] == k_tid[k] && k_graph[k + 1] == k_graph[k]
            && k_ts[k + 1] < limit)
            e = k_ts[k + 1];
        uint64_t w = end[k] ? work_end[k] : e;
        end[k] = e;
        work_end[k] = w < e ? w : e;
    }
}

/* One trap per op (model/one_trap.py): each thread's arrivals at each node's barrier, the
   barriers' releases, the threads' numbers and their entries into the graph loop. */

/* Of n barriers (by thread, then time; `graph`: each one's, `ptr`: the node it names), the
   last of each thread at each node of each graph: their rows, in order, in `rows`. Returns
   how many; -1 where memory ran out. */
int64_t arrivals(int64_t n, const int64_t *graph, const uint32_t *tid, const uint64_t *ptr,
                 int64_t *rows) {
    uint64_t mask;
    int64_t *slots = empty_slots(n, &mask), found = 0;
    int64_t *last = malloc((n > 0 ? n : 1) * sizeof *last);
    if (slots == NULL || last == NULL) {
        free(slots);
        free(last);
        return -1;
    }
    for (int64_t r = 0; r < n; r++) {
        uint64_t k = find(slots, mask, graph, ptr, tid, graph[r], ptr[r], tid[r]);
        slots[k] = r;  /* the entry's fields are the latest row's: the same values */
        last[r] = (int64_t)k;
    }
    for (int64_t r = 0; r < n; r++)
        if (slots[last[r]] == r) rows[found++] = r;
    free(slots);
    free(last);
    return found;
}

struct release { int64_t graph; uint64_t ts; int64_t id; };

static int by_graph_release(const void *a, const void *b) {
    const struct release *x = a, *y = b;
    if (x->graph != y->graph) return x->graph < y->graph ? -1 : 1;
    if (x->ts != y->ts) return x->ts < y->ts ? -1 : 1;
    return x->id < y->id ? -1 : x->id > y->id;
}

/* The (graph, node)s of m arrivals (`graph`, `ptr`, `ts`), numbered by their first arrival:
   each arrival's in `group`; per (graph, node), its graph, its node and the release of the
   barrier before it (the one of the graph's nodes before it by release, then number; the
   graph's begin for the first), in `group_graph`, `group_ptr`, `before`. Returns how many; -1
   where memory ran out. */
int64_t releases(int64_t m, const int64_t *graph, const uint64_t *ptr, const uint64_t *ts,
                 const uint64_t *graph_begin, int64_t *group, int64_t *group_graph,
                 uint64_t *group_ptr, uint64_t *before) {
    uint64_t mask;
    int64_t *slots = empty_slots(m, &mask), count = 0, sorted = 1;
    struct release *node = malloc((m > 0 ? m : 1) * sizeof *node);
    if (slots == NULL || node == NULL) {
        free(slots);
        free(node);
        return -1;
    }
    for (int64_t i = 0; i < m; i++) {
        uint64_t k = find(slots, mask, group_graph, group_ptr, NULL, graph[i], ptr[i], 0);
        if (slots[k] < 0) {
            slots[k] = count;
            group_graph[count] = graph[i];
            group_ptr[count] = ptr[i];
            node[count] = (struct release){graph[i], 0, count};
            count++;
        }
        struct release *at = &node[slots[k]];
        at->ts = ts[i] > at->ts ? ts[i] : at->ts;
        group[i] = slots[k];
    }
    for (int64_t j = 1; j < count && sorted; j++)
        sorted = by_graph_release(&node[j - 1], &node[j]) < 0;
    if (!sorted) qsort(node, count, sizeof *node, by_graph_release);
    for (int64_t j = 0; j < count; j++)
        before[node[j].id] = j > 0 && node[j - 1].graph == node[j].graph
                                 ? node[j - 1].ts : graph_begin[node[j].graph];
    free(slots);
    free(node);
    return count;
}

struct thread { int64_t graph; int64_t other; uint32_t tid; int64_t number; };

static int by_graph_caller_thread(const void *a, const void *b) {
    const struct thread *x = a, *y = b;
    if (x->graph != y->graph) return x->graph < y->graph ? -1 : 1;
    if (x->other != y->other) return x->other < y->other ? -1 : 1;
    return x->tid < y->tid ? -1 : x->tid > y->tid;
}

/* Per arrival of m, its thread's number in its graph (0: the graph's calling thread,
   `graph_tid`; then the others by thread id) in `ith`, and the threads of its graph that
   arrived in `nth`. Returns 0, or -1 where memory ran out. */
int64_t thread_numbers(int64_t m, const int64_t *graph, const uint32_t *tid,
                       const uint32_t *graph_tid, int64_t *ith, int64_t *nth) {
    uint64_t mask;
    int64_t *slots = empty_slots(m, &mask), count = 0, size = m > 0 ? m : 1;
    struct thread *seen = malloc(size * sizeof *seen);
    int64_t *of = malloc(size * sizeof *of), *graphs = malloc(size * sizeof *graphs);
    int64_t *number = malloc(size * sizeof *number), *threads = malloc(size * sizeof *threads);
    uint32_t *tids = malloc(size * sizeof *tids);
    int64_t ok = slots && seen && of && graphs && number && threads && tids ? 0 : -1;
    for (int64_t i = 0; i < m && ok == 0; i++) {
        uint64_t k = find(slots, mask, graphs, NULL, tids, graph[i], 0, tid[i]);
        if (slots[k] < 0) {
            slots[k] = count;
            graphs[count] = graph[i];
            tids[count] = tid[i];
            seen[count] = (struct thread){graph[i], tid[i] != graph_tid[graph[i]], tid[i], count};
            count++;
        }
        of[i] = slots[k];
    }
    if (ok == 0) {
        qsort(seen, count, sizeof *seen, by_graph_caller_thread);
        for (int64_t first = 0, end; first < count; first = end) {
            for (end = first; end < count && seen[end].graph == seen[first].graph; end++) {}
            for (int64_t j = first; j < end; j++) {
                number[seen[j].number] = j - first;
                threads[seen[j].number] = end - first;
            }
        }
        for (int64_t i = 0; i < m; i++) {
            ith[i] = number[of[i]];
            nth[i] = threads[of[i]];
        }
    }
    free(slots);
    free(seen);
    free(of);
    free(graphs);
    free(number);
    free(threads);
    free(tids);
    return ok;
}

/* Per query (q_graph, q_tid) of m, the time of the last of n loop entries (`graph`, `tid`,
   `ts`, by thread, then time) of that thread in that graph, 0 for none: in `found`. Returns 0,
   or -1 where memory ran out. */
int64_t entries(int64_t n, const int64_t *graph, const uint32_t *tid, const uint64_t *ts,
                int64_t m, const int64_t *q_graph, const uint32_t *q_tid, uint64_t *found) {
    uint64_t mask;
    int64_t *slots = empty_slots(n, &mask);
    if (slots == NULL) return -1;
    for (int64_t r = 0; r < n; r++)
        slots[find(slots, mask, graph, NULL, tid, graph[r], 0, tid[r])] = r;
    for (int64_t j = 0; j < m; j++) {
        int64_t at = slots[find(slots, mask, graph, NULL, tid, q_graph[j], 0, q_tid[j])];
        found[j] = at >= 0 ? ts[at] : 0;
    }
    free(slots);
    return 0;
}

/* Ids for n flows in start order (`begin` sorted; each open up to and at its `end`, started
   in graph `graph`, 0 <= graph < graphs), as layout.flow_ids gives them: a flow's number in
   its graph modulo the most flows that start while any one is open (from it on, up to its
   end), plus 1; or its number in all modulo that, plus 1, where a flow would start while
   another of its id is open: in `ids`. Times are nanoseconds, never INT64_MIN (an id's "open
   until" before its first flow). Returns 0, or -1 where memory ran out. */
int64_t flow_ids(int64_t n, const int64_t *begin, const int64_t *end, const int64_t *graph,
                 int64_t graphs, int64_t *ids) {
    int64_t cycle = 1;
    for (int64_t i = 0; i < n; i++) {
        if (begin[i] > end[i]) continue;  /* none from it on: below the least cycle */
        int64_t lo = i, step = 1;  /* begin[lo] <= end[i]: gallop, then bisect */
        while (lo + step < n && begin[lo + step] <= end[i]) {
            lo += step;
            step <<= 1;
        }
        int64_t hi = lo + step < n ? lo + step : n;
        while (hi - lo > 1) {
            int64_t mid = lo + (hi - lo) / 2;
            if (begin[mid] <= end[i]) lo = mid; else hi = mid;
        }
        if (hi - i > cycle) cycle = hi - i;
    }
    int64_t *counts = calloc(graphs + 1, sizeof *counts);  /* + 1: never calloc(0) */
    int64_t *open_until = malloc((cycle + 1) * sizeof *open_until);  /* by id: none yet */
    int64_t ok = counts != NULL && open_until != NULL ? 0 : -1;
    for (int64_t id = 0; ok == 0 && id <= cycle; id++) open_until[id] = INT64_MIN;
    int shared = 0;
    for (int64_t i = 0; ok == 0 && i < n; i++) {
        int64_t id = counts[graph[i]]++ % cycle + 1;
        shared |= begin[i] <= open_until[id];
        if (end[i] > open_until[id]) open_until[id] = end[i];
        ids[i] = id;
    }
    for (int64_t i = 0; ok == 0 && shared && i < n; i++) ids[i] = i % cycle + 1;
    free(counts);
    free(open_until);
    return ok;
}
