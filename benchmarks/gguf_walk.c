/* The C baseline for memfit's header reader: walk a GGUF file's header (every key and value, every string of
 * every array, every tensor info), as gguf_init does before it allocates anything, keeping nothing. Like memfit's
 * reader it reads the file (no mmap: a file truncated meanwhile is an error, not a SIGBUS) as the walk needs it, at
 * least 1 MiB at a time, keeping only what it has not walked yet. Little-endian files only (the benchmark writes them).
 *
 *   gguf_walk FILE REPEATS  ->  prints "<CPU nanoseconds per walk> <header bytes>"
 *
 * Each walk opens and reads the file again (the OS page cache warm after the first). Built by benchmarks/c_walk.py
 * with the machine's C compiler, in the benchmark's run. */
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

enum { T_U8, T_I8, T_U16, T_I16, T_U32, T_I32, T_F32, T_BOOL, T_STRING, T_ARRAY, T_U64, T_I64, T_F64 };

static const size_t SCALAR_SIZE[] = {1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8};

enum { WINDOW = 1 << 20 };

typedef struct {
    int fd, bad;
    uint8_t *buf;                 /* the file's bytes [base, base + have) */
    size_t base, have, cap, pos;  /* pos: the walk's offset in the file */
} cursor;

/* Bytes [pos, pos + n) in the buffer: the bytes not walked yet kept, more of the file read after them. */
static int need(cursor *c, uint64_t n) {
    if (c->pos + n <= c->base + c->have) return 1;
    size_t kept = c->base + c->have - c->pos;
    if (n + WINDOW > c->cap) {
        c->cap = n + WINDOW;
        uint8_t *grown = malloc(c->cap);
        if (grown == NULL) return 0;
        memcpy(grown, c->buf + (c->pos - c->base), kept);
        free(c->buf);
        c->buf = grown;
    } else {
        memmove(c->buf, c->buf + (c->pos - c->base), kept);
    }
    c->base = c->pos;
    c->have = kept;
    while (c->have < n) {
        ssize_t got = read(c->fd, c->buf + c->have, c->cap - c->have);
        if (got <= 0) return 0;
        c->have += (size_t)got;
    }
    return 1;
}

static uint64_t take(cursor *c, size_t n) {
    uint64_t v = 0;
    if (!need(c, n)) {
        c->bad = 1;
        return 0;
    }
    memcpy(&v, c->buf + (c->pos - c->base), n);
    c->pos += n;
    return v;
}

static void skip(cursor *c, uint64_t n) {
    if (!need(c, n)) {
        c->bad = 1;
        return;
    }
    c->pos += n;
}

static void skip_string(cursor *c) { skip(c, take(c, 8)); }

static void skip_value(cursor *c, uint32_t type) {
    if (type == T_STRING) {
        skip_string(c);
    } else if (type == T_ARRAY) {
        uint32_t item = (uint32_t)take(c, 4);
        uint64_t count = take(c, 8);
        if (item == T_STRING) {
            for (uint64_t i = 0; i < count && !c->bad; i++) skip_string(c);
        } else if (item < T_STRING || (item > T_ARRAY && item <= T_F64)) {
            skip(c, count * SCALAR_SIZE[item]);
        } else {
            c->bad = 1;
        }
    } else if (type <= T_F64) {
        skip(c, SCALAR_SIZE[type]);
    } else {
        c->bad = 1;
    }
}

/* The header's length in bytes (the end of the last tensor info), or 0 when it is not a walkable GGUF. */
static size_t walk(cursor *cur) {
    cursor c = *cur;
    if (take(&c, 4) != 0x46554747u) return 0; /* "GGUF" */
    take(&c, 4);                               /* version */
    uint64_t n_tensors = take(&c, 8), n_kv = take(&c, 8);
    for (uint64_t i = 0; i < n_kv && !c.bad; i++) {
        skip_string(&c);
        skip_value(&c, (uint32_t)take(&c, 4));
    }
    for (uint64_t i = 0; i < n_tensors && !c.bad; i++) {
        skip_string(&c);
        uint32_t n_dims = (uint32_t)take(&c, 4);
        skip(&c, 8 * (uint64_t)n_dims + 4 + 8); /* dims, type, offset */
    }
    *cur = c;
    return c.bad ? 0 : c.pos;
}

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: %s FILE REPEATS\n", argv[0]);
        return 2;
    }
    long repeats = atol(argv[2]);
    struct timespec start, end;
    size_t header = 0;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &start);
    for (long r = 0; r < repeats; r++) {
        cursor c = {open(argv[1], O_RDONLY), 0, NULL, 0, 0, 0, 0};
        if (c.fd < 0) return 1;
        header = walk(&c);
        free(c.buf);
        close(c.fd);
        if (header == 0) return 1;
    }
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &end);
    double ns = (end.tv_sec - start.tv_sec) * 1e9 + (end.tv_nsec - start.tv_nsec);
    printf("%.0f %zu\n", ns / repeats, header);
    return 0;
}
