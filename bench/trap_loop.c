/* The traps bench's target: a loop calling a function whose first instruction is a `push`
 * (built with frame pointers and without -fcf-protection), the kind of site Linux's x86 uprobes
 * emulate and the recorder's probes sit on; prints the wall time per call and the user and
 * kernel time the kernel's tick accounting gave the process per call. */
#include <stdio.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <time.h>

volatile long sink;

__attribute__((noinline)) void probed(void)
{
    long x[4];
    x[0] = sink;
    __asm__ volatile("" ::"r"(x) : "memory");
    sink = x[0];
}

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

static double seconds(struct timeval t) { return t.tv_sec + t.tv_usec * 1e-6; }

int main(int argc, char **argv)
{
    long calls = argc > 1 ? atol(argv[1]) : 1000000;
    struct rusage before, after;
    getrusage(RUSAGE_SELF, &before);
    double start = now();
    for (long i = 0; i < calls; i++)
        probed();
    double wall = now() - start;
    getrusage(RUSAGE_SELF, &after);
    printf("%.2f %.2f %.2f\n", wall / calls * 1e9,
           (seconds(after.ru_utime) - seconds(before.ru_utime)) / calls * 1e9,
           (seconds(after.ru_stime) - seconds(before.ru_stime)) / calls * 1e9);
    return 0;
}
