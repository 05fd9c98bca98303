/* An independent STREAM-like Copy for `nox -s bench -- --only calibrate`: OMP_NUM_THREADS
 * threads copy an array of 256 MiB of doubles into another (OpenMP static split), best of 10;
 * prints the GB/s of bytes read plus bytes written, as STREAM counts them. */
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>

#define N (256L * 1024 * 1024 / 8)

int main(void) {
    double *a = malloc(N * sizeof *a), *b = malloc(N * sizeof *b), best = 1e30;
    if (!a || !b) return 1;
#pragma omp parallel for schedule(static)
    for (long i = 0; i < N; i++) { a[i] = 1.0; b[i] = 0.0; }
    for (int r = 0; r < 10; r++) {
        double t = omp_get_wtime();
#pragma omp parallel for schedule(static)
        for (long i = 0; i < N; i++) b[i] = a[i];
        t = omp_get_wtime() - t;
        if (t < best) best = t;
    }
    printf("%.3f\n", 2.0 * sizeof(double) * N / best / 1e9 + 0 * b[N / 2]);
    return 0;
}
