/* Child process: many simulated gateways making a gateway's whole etcd request mix, in C
 * (figure 6). The same job, commands and accounting as bench/leanload.py, at a fraction of
 * its CPU per request, so that the capacity benchmark measures etcd, not its client.
 *
 *     cc -O2 -o leanload bench/leanload.c      (bench/cgen.py builds it at run time)
 *     leanload '{"endpoints": [...], "first": 0, "seed": 1, "registry_key_b64": "...",
 *                "registry_mod_revision": 7, "lease_ttl": 30, "interval": 1.0}'
 *
 * One simulated gateway, over raw HTTP/1.1 keep-alive connections of its own to the member
 * (first + index) modulo the number of members:
 * - "mix": a registry poll turn every `interval` at a random phase on a fixed schedule, a range
 *   of the registry with min_mod_revision past its current revision, serializable except every
 *   10th turn's (each gateway starts at a random point of that cycle, as in a fleet's steady
 *   state); one watch stream of the registry (progress notifications on) on a second
 *   connection, read and dropped, whose bytes prove the view fresh as the library's progress
 *   notifications do: a serializable poll due within PROOF_WINDOW turns of the stream's last
 *   bytes is left out (counted as proven), the linearizable one never is; a lease keepalive
 *   every lease_ttl/3 (lease granted at start; lease_ttl is required: bench.cgen.spec gives
 *   the gateway config's default);
 * - "naive": a full linearizable read of the registry every `interval`, the same keepalive,
 *   no watch.
 * "parts" in the spec (a list, default ["poll", "watch", "keepalive", "proof"]) switches parts
 * of the mix off, as bench/leanload.py: without "poll" no registry poll, without "watch" no
 * watch stream, without "keepalive" no keepalive (the lease is still granted once at start),
 * without "proof" every turn's poll is made (the mix before the watch proved freshness);
 * "naive" ignores it. An unknown part ends the process with an error naming it.
 * "record_prefix" in the spec makes each start the gateway library's (figure 9's replay): one
 * linearizable read-only transaction of two ranges, the lease grant, a put of the record
 * (record_prefix + index, 256 bytes) on the lease, then the mix.
 * One request out per gateway at a time: a poll due while one is out is not made (counted as
 * skipped); a keepalive due then is sent after the answer. Answers are framed (status line,
 * Content-Length or the chunked terminator), never decoded, except the lease grant's ID.
 * A request out longer than 0.5 s (a sweep every 50 ms finds it) is a failed poll and its
 * connection is replaced. Everything is non-blocking on one epoll loop; timers are a heap.
 *
 * stdin, JSON lines: {"cmd":"set","count":N,"kind":"mix"|"naive"}, {"cmd":"mark"},
 * {"cmd":"window","t0":T0,"t1":T1} (CLOCK_MONOTONIC seconds, Python's time.monotonic()).
 * stdout, JSON lines: {"kind":"hello"}, {"kind":"set","count":N}, {"kind":"mark"},
 * {"kind":"window",...} (the fields of bench/leanload.py), {"kind":"error","detail":...}.
 * EOF on stdin ends the process. Plain C99 + POSIX/Linux (epoll), no other dependency.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define BOUND 0.5            /* a request out longer than this fails; its connection is dropped */
#define SWEEP 0.05
#define GRANT_BOUND 10.0     /* a lease grant at start */
#define LINEARIZABLE_EVERY 10
#define PROOF_WINDOW 1.5           /* turns: awide_gateway_cluster.gateway.PROOF_WINDOW */
#define START_BATCH 200      /* gateways connecting at once */
#define MAX_EPS 16

enum { DOWN, CONNECTING, UP };
enum { OUT_NONE, OUT_GRANT, OUT_POLL, OUT_KEEPALIVE, OUT_FIRST, OUT_PUT };
enum { T_POLL, T_KEEPALIVE };
enum { MIX, NAIVE };

typedef struct {
    int fd, state;
    uint16_t epoch;
    char *buf;
    size_t len, cap;
} Conn;

typedef struct {
    int used, started, failed;
    uint32_t gen;
    int ep;
    Conn u, w;                  /* requests; the watch stream */
    int out, queued_ka;
    double sent, due;
    long polls, turns;
    double proof;               /* when the watch stream last delivered bytes (0: never) */
    char ka[320];               /* {"ID":"..."} body's request, built once the lease is known */
    int ka_len;
} Gw;

typedef struct { double due; uint32_t slot, gen; int what; } Timer;
typedef struct { double sent, lat, late; int ok; } Rec;
typedef struct { char *s; size_t len, cap; } Str;

typedef struct {
    struct sockaddr_storage addr;
    socklen_t alen;
    char host[128];
    Str serial, linear, naive, grant, watch, first;
} Ep;

static Ep eps[MAX_EPS];
static int neps;
static long first_index;
static double interval = 1.0, ka_every;
static int lease_ttl;
static int kind = MIX;
static int part_poll = 1, part_watch = 1, part_keepalive = 1, part_proof = 1;  /* of the mix */
/* "start_mix" (spec "record_prefix" given): a start as the gateway library's: one linearizable
 * read-only transaction of two ranges, the registry and the namespace's layout record (the
 * registry key read again in the layout's stead), the grant, a put of the gateway's record on
 * its lease (key record_prefix + index, a 256-byte value), then the mix */
static int start_mix;
static char record_prefix[256];
static char record_value_b64[400];
static uint64_t rng_state;

static Gw *gws;
static size_t ngw, capgw, inited;
static Timer *heap;
static size_t nheap, capheap;
static Rec *recs;
static size_t nrec, caprec;
static int efd;

static long requests, skipped, keepalive_failed, reconnect_failed, start_failed;
static long long watch_bytes;
static long mark_requests;
static double mark_cpu, mark_sys;

static size_t *startq;
static size_t nstartq, capstartq, startq_at;
static int starting;

static int pending_set, pending_window;
static double win_t0, win_t1, win_reply_at;

static char inbuf[65536];
static size_t inlen;
static int stdin_open = 1;

static void die(const char *what) {
    fprintf(stderr, "leanload: %s: %s\n", what, strerror(errno));
    exit(2);
}

static void *grow(void *p, size_t *cap, size_t need, size_t size) {
    if (need <= *cap) return p;
    size_t c = *cap ? *cap : 64;
    while (c < need) c *= 2;
    p = realloc(p, c * size);
    if (!p) die("out of memory");
    *cap = c;
    return p;
}

static void sadd(Str *s, const char *fmt, ...) {
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        size_t room = s->cap - s->len;
        int n = vsnprintf(s->s ? s->s + s->len : NULL, s->s ? room : 0, fmt, ap);
        va_end(ap);
        if (n < 0) die("format");
        if ((size_t)n < room) { s->len += (size_t)n; return; }
        s->s = grow(s->s, &s->cap, s->len + (size_t)n + 1, 1);
    }
}

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* This process's CPU seconds: user + system, and the system (kernel) part alone. */
static double cpu_seconds(double *sys) {
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    double st = (double)ru.ru_stime.tv_sec + ru.ru_stime.tv_usec * 1e-6;
    if (sys) *sys = st;
    return (double)ru.ru_utime.tv_sec + ru.ru_utime.tv_usec * 1e-6 + st;
}

static double uniform(double hi) {              /* splitmix64 */
    uint64_t z = (rng_state += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    z ^= z >> 31;
    return (double)(z >> 11) * (1.0 / 9007199254740992.0) * hi;
}

static void emit(const char *line) {
    fputs(line, stdout);
    fputc('\n', stdout);
    fflush(stdout);
}

static void emit_error(const char *fmt, ...) {
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    for (char *p = msg; *p; p++)
        if (*p == '"' || *p == '\\' || (unsigned char)*p < 0x20) *p = ' ';
    printf("{\"kind\": \"error\", \"detail\": \"%s\"}\n", msg);
    fflush(stdout);
}

/* ------------------------------------------------------------ JSON of the spec and commands */

/* The value after "key": in a flat JSON text (the spec and commands are the bench's own). */
static const char *jfind(const char *s, const char *key) {
    char pat[64];
    snprintf(pat, sizeof pat, "\"%s\"", key);
    const char *p = strstr(s, pat);
    if (!p) return NULL;
    p += strlen(pat);
    while (*p == ' ' || *p == '\t') p++;
    if (*p != ':') return NULL;
    p++;
    while (*p == ' ' || *p == '\t') p++;
    return p;
}

static double jnum(const char *s, const char *key, double dflt) {
    const char *p = jfind(s, key);
    if (!p) return dflt;
    if (*p == '"') p++;
    char *end;
    double v = strtod(p, &end);
    return end == p ? dflt : v;
}

/* A string value copied into out (no escapes expected); the pointer past it, or NULL. */
static const char *jstr_at(const char *p, char *out, size_t cap) {
    if (!p || *p != '"') return NULL;
    p++;
    size_t n = 0;
    while (*p && *p != '"') {
        if (*p == '\\' || n + 1 >= cap) return NULL;
        out[n++] = *p++;
    }
    if (*p != '"') return NULL;
    out[n] = 0;
    return p + 1;
}

/* The spec's "parts" list, when there is one: the parts of the mix switched on. */
static int parse_parts(const char *spec) {
    const char *p = jfind(spec, "parts");
    if (!p) return 0;
    if (*p != '[') { fprintf(stderr, "leanload: spec parts must be a list\n"); return -1; }
    part_poll = part_watch = part_keepalive = part_proof = 0;
    p++;
    for (;;) {
        while (*p == ' ' || *p == ',') p++;
        if (*p == ']') return 0;
        char name[32];
        p = jstr_at(p, name, sizeof name);
        if (!p) { fprintf(stderr, "leanload: spec parts: bad list\n"); return -1; }
        if (strcmp(name, "poll") == 0) part_poll = 1;
        else if (strcmp(name, "watch") == 0) part_watch = 1;
        else if (strcmp(name, "keepalive") == 0) part_keepalive = 1;
        else if (strcmp(name, "proof") == 0) part_proof = 1;
        else {
            fprintf(stderr, "leanload: spec parts: unknown part %s (known: poll, watch, "
                    "keepalive, proof)\n", name);
            return -1;
        }
    }
}

/* ------------------------------------------------------------ requests, built once */

static void request(Str *s, const char *host, const char *path, const char *body) {
    sadd(s, "POST %s HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\n"
            "Content-Length: %zu\r\n\r\n%s", path, host, strlen(body), body);
}

static void setup_endpoint(Ep *e, const char *url, const char *key, long rev) {
    const char *hp = strstr(url, "://");
    hp = hp ? hp + 3 : url;
    snprintf(e->host, sizeof e->host, "%s", hp);
    char host[128];
    snprintf(host, sizeof host, "%s", hp);
    char *colon = strrchr(host, ':');
    if (!colon) { fprintf(stderr, "leanload: endpoint %s has no port\n", url); exit(2); }
    *colon = 0;
    const char *port = colon + 1;
    char *h = host;
    if (h[0] == '[') { h++; char *b = strchr(h, ']'); if (b) *b = 0; }
    struct addrinfo hints, *res;
    memset(&hints, 0, sizeof hints);
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_NUMERICSERV;
    int rc = getaddrinfo(h, port, &hints, &res);
    if (rc != 0) {
        fprintf(stderr, "leanload: endpoint %s: %s\n", url, gai_strerror(rc));
        exit(2);
    }
    memcpy(&e->addr, res->ai_addr, res->ai_addrlen);
    e->alen = res->ai_addrlen;
    freeaddrinfo(res);
    char body[1024];
    snprintf(body, sizeof body,
             "{\"key\":\"%s\",\"min_mod_revision\":\"%ld\",\"serializable\":true}", key, rev + 1);
    request(&e->serial, e->host, "/v3/kv/range", body);
    snprintf(body, sizeof body, "{\"key\":\"%s\",\"min_mod_revision\":\"%ld\"}", key, rev + 1);
    request(&e->linear, e->host, "/v3/kv/range", body);
    snprintf(body, sizeof body, "{\"key\":\"%s\"}", key);
    request(&e->naive, e->host, "/v3/kv/range", body);
    snprintf(body, sizeof body, "{\"TTL\":\"%d\"}", lease_ttl);
    request(&e->grant, e->host, "/v3/lease/grant", body);
    snprintf(body, sizeof body,
             "{\"create_request\":{\"key\":\"%s\",\"start_revision\":\"%ld\","
             "\"progress_notify\":true}}", key, rev + 1);
    request(&e->watch, e->host, "/v3/watch", body);
    snprintf(body, sizeof body, "{\"success\":[{\"request_range\":{\"key\":\"%s\"}},"
             "{\"request_range\":{\"key\":\"%s\"}}]}", key, key);
    request(&e->first, e->host, "/v3/kv/txn", body);
}

/* ------------------------------------------------------------ timers (a binary min-heap) */

static void timer_add(double due, size_t slot, int what) {
    heap = grow(heap, &capheap, nheap + 1, sizeof *heap);
    size_t i = nheap++;
    Timer t = {due, (uint32_t)slot, gws[slot].gen, what};
    while (i > 0) {
        size_t up = (i - 1) / 2;
        if (heap[up].due <= due) break;
        heap[i] = heap[up];
        i = up;
    }
    heap[i] = t;
}

static Timer timer_pop(void) {
    Timer top = heap[0], last = heap[--nheap];
    size_t i = 0;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= nheap) break;
        if (c + 1 < nheap && heap[c + 1].due < heap[c].due) c++;
        if (heap[c].due >= last.due) break;
        heap[i] = heap[c];
        i = c;
    }
    if (nheap) heap[i] = last;
    return top;
}

/* ------------------------------------------------------------ connections */

static uint64_t tag(size_t slot, int watch, uint16_t epoch) {
    return ((uint64_t)slot << 17) | ((uint64_t)watch << 16) | epoch;
}

static void conn_close(Conn *c, int abort_it) {
    if (c->fd >= 0) {
        if (abort_it) {
            struct linger lg = {1, 0};
            setsockopt(c->fd, SOL_SOCKET, SO_LINGER, &lg, sizeof lg);
        }
        close(c->fd);
    }
    c->fd = -1;
    c->state = DOWN;
    c->len = 0;
    c->epoch++;
}

/* 0 when the connection is under way; -1 (counted by the caller) when it cannot start. */
static int conn_open(Conn *c, size_t slot, int watch) {
    conn_close(c, 0);
    const Ep *e = &eps[gws[slot].ep];
    int fd = socket(e->addr.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) return -1;
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    if (connect(fd, (const struct sockaddr *)&e->addr, e->alen) < 0 && errno != EINPROGRESS) {
        close(fd);
        return -1;
    }
    c->fd = fd;
    c->state = CONNECTING;
    struct epoll_event ev = {.events = EPOLLIN | EPOLLOUT, .data.u64 = tag(slot, watch, c->epoch)};
    if (epoll_ctl(efd, EPOLL_CTL_ADD, fd, &ev) < 0) { conn_close(c, 0); return -1; }
    return 0;
}

static int conn_write(Conn *c, const char *data, size_t len) {
    ssize_t n = write(c->fd, data, len);
    return n == (ssize_t)len ? 0 : -1;    /* a short write on a fresh request: treat as lost */
}

/* ------------------------------------------------------------ gateways */

#define BEHIND 2                /* a record's ok: a poll due but not made (the gateway behind) */

static void record(double sent, double lat, int ok, double late) {
    recs = grow(recs, &caprec, nrec + 1, sizeof *recs);
    recs[nrec++] = (Rec){sent, lat, late, ok};
}

static void start_done(size_t slot, int ok, const char *why) {
    Gw *g = &gws[slot];
    if (g->started || g->failed) return;
    starting--;
    if (ok) { g->started = 1; return; }
    g->failed = 1;
    g->out = OUT_NONE;
    start_failed++;
    conn_close(&g->u, 1);
    conn_close(&g->w, 1);
    emit_error("gateway %zu could not start against %s: %s", slot, eps[g->ep].host, why);
}

static void gw_send(size_t slot, int what, const Str *req, double due);

static void gw_reconnect(size_t slot) {
    Gw *g = &gws[slot];
    if (!g->used || g->failed) return;
    if (conn_open(&g->u, slot, 0) < 0) reconnect_failed++;
}

/* The request connection went away (EOF, error, short write, over the bound). */
static void gw_lost(size_t slot, double t, int abort_it) {
    Gw *g = &gws[slot];
    if (!g->started) {
        start_done(slot, 0, "request connection lost before the lease was granted");
        return;
    }
    if (g->out == OUT_POLL) record(g->sent, t - g->sent, 0, g->sent - g->due);
    else if (g->out == OUT_KEEPALIVE) keepalive_failed++;
    g->out = OUT_NONE;
    conn_close(&g->u, abort_it);
    gw_reconnect(slot);
}

static void gw_send(size_t slot, int what, const Str *req, double due) {
    Gw *g = &gws[slot];
    double t = now();
    g->out = what;
    g->sent = t;
    g->due = due;
    if (conn_write(&g->u, req->s, req->len) < 0) gw_lost(slot, t, 1);
}

static void gw_send_keepalive(size_t slot, double due) {
    Gw *g = &gws[slot];
    if (g->u.state != UP || !g->ka_len) return;
    Str req = {g->ka, (size_t)g->ka_len, sizeof g->ka};
    gw_send(slot, OUT_KEEPALIVE, &req, due);
}

/* Turns left out because the watch proved freshness, by due time in 100 ms buckets (a ring of
 * about 7 minutes), so that a window counts those due within it, like its polls. */
#define PBUCKETS 4096
static struct { long idx, n; } pbuckets[PBUCKETS];

static void proven_add(double due) {
    long i = (long)(due * 10.0);
    size_t k = (size_t)(i % PBUCKETS);
    if (pbuckets[k].idx != i) { pbuckets[k].idx = i; pbuckets[k].n = 0; }
    pbuckets[k].n++;
}

static long proven_in(double t0, double t1) {
    long n = 0;
    for (long i = (long)(t0 * 10.0); i < (long)(t1 * 10.0); i++)
        if (pbuckets[(size_t)(i % PBUCKETS)].idx == i) n += pbuckets[(size_t)(i % PBUCKETS)].n;
    return n;
}

static void gw_poll(size_t slot, double due) {
    Gw *g = &gws[slot];
    timer_add(due + interval, slot, T_POLL);
    int linear = g->turns++ % LINEARIZABLE_EVERY == 0;
    if (kind == MIX && part_proof && part_watch && !linear && g->proof > 0.0
        && due - g->proof < PROOF_WINDOW * interval) {
        proven_add(due);                             /* the watch proved the view fresh */
        return;
    }
    if (g->out != OUT_NONE || g->u.state != UP) {
        skipped++;                                   /* behind: this poll is not made */
        record(due, 0.0, BEHIND, 0.0);
        if (g->u.state == DOWN) gw_reconnect(slot);
        return;
    }
    g->polls++;
    const Ep *e = &eps[g->ep];
    const Str *req = kind == NAIVE ? &e->naive : linear ? &e->linear : &e->serial;
    gw_send(slot, OUT_POLL, req, due);
}

static void gw_keepalive(size_t slot, double due) {
    Gw *g = &gws[slot];
    timer_add(due + ka_every, slot, T_KEEPALIVE);
    if (g->out != OUT_NONE) { g->queued_ka = 1; return; }
    gw_send_keepalive(slot, due);
}

static void b64(const unsigned char *in, size_t n, char *out) {
    static const char t[] =
        "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    size_t o = 0;
    for (size_t i = 0; i < n; i += 3) {
        unsigned v = (unsigned)in[i] << 16;
        if (i + 1 < n) v |= (unsigned)in[i + 1] << 8;
        if (i + 2 < n) v |= in[i + 2];
        out[o++] = t[(v >> 18) & 63];
        out[o++] = t[(v >> 12) & 63];
        out[o++] = i + 1 < n ? t[(v >> 6) & 63] : '=';
        out[o++] = i + 2 < n ? t[v & 63] : '=';
    }
    out[o] = 0;
}

static void gw_begin_mix(size_t slot);

static void gw_granted(size_t slot, const char *body, size_t blen) {
    Gw *g = &gws[slot];
    const char *p = memmem(body, blen, "\"ID\":", 5);
    long long id = 0;
    if (p) {
        p += 5;
        while (p < body + blen && (*p == '"' || *p == ' ')) p++;
        while (p < body + blen && *p >= '0' && *p <= '9') id = id * 10 + (*p++ - '0');
    }
    if (id <= 0) { start_done(slot, 0, "the lease grant's answer has no ID"); return; }
    char bodytxt[48];
    snprintf(bodytxt, sizeof bodytxt, "{\"ID\":\"%lld\"}", id);
    int n = snprintf(g->ka, sizeof g->ka, "POST /v3/lease/keepalive HTTP/1.1\r\nHost: %s\r\n"
                     "Content-Type: application/json\r\nContent-Length: %zu\r\n\r\n%s",
                     eps[g->ep].host, strlen(bodytxt), bodytxt);
    if (n <= 0 || (size_t)n >= sizeof g->ka) {
        start_done(slot, 0, "keepalive request too long");
        return;
    }
    g->ka_len = n;
    if (start_mix) {
        static Str put;
        char key[320], keyb[440], pbody[1024];
        snprintf(key, sizeof key, "%s%ld", record_prefix, first_index + (long)slot);
        b64((const unsigned char *)key, strlen(key), keyb);
        snprintf(pbody, sizeof pbody, "{\"key\":\"%s\",\"value\":\"%s\",\"lease\":\"%lld\"}",
                 keyb, record_value_b64, id);
        put.len = 0;
        request(&put, eps[g->ep].host, "/v3/kv/put", pbody);
        gw_send(slot, OUT_PUT, &put, now());
        return;
    }
    gw_begin_mix(slot);
}

/* The lease granted (and with "start_mix" the record put): the watch and the mix's timers. */
static void gw_begin_mix(size_t slot) {
    Gw *g = &gws[slot];
    if (kind == MIX && part_watch && conn_open(&g->w, slot, 1) < 0) {
        start_done(slot, 0, "cannot open the watch connection");
        return;
    }
    double t = now();
    double poll_at = t + uniform(interval), ka_at = t + uniform(ka_every);
    /* a fleet in its steady state: each gateway at its own point of the 10-turn cycle */
    g->turns = (long)uniform((double)LINEARIZABLE_EVERY);
    if (kind == NAIVE || part_poll) timer_add(poll_at, slot, T_POLL);
    if (kind == NAIVE || part_keepalive) timer_add(ka_at, slot, T_KEEPALIVE);
    start_done(slot, 1, NULL);
}

static void gw_answered(size_t slot, int ok, const char *body, size_t blen) {
    Gw *g = &gws[slot];
    if (g->out == OUT_NONE) return;
    int what = g->out;
    double t = now();
    g->out = OUT_NONE;
    requests++;
    if (what == OUT_GRANT) {
        if (!ok) { start_done(slot, 0, "the lease grant was refused"); return; }
        gw_granted(slot, body, blen);
        return;
    }
    if (what == OUT_FIRST) {
        if (!ok) { start_done(slot, 0, "the start read was refused"); return; }
        gw_send(slot, OUT_GRANT, &eps[g->ep].grant, t);
        return;
    }
    if (what == OUT_PUT) {
        if (!ok) { start_done(slot, 0, "the record put was refused"); return; }
        gw_begin_mix(slot);
        return;
    }
    if (what == OUT_POLL) record(g->sent, t - g->sent, ok, g->sent - g->due);
    else if (!ok) keepalive_failed++;
    if (g->queued_ka) {
        g->queued_ka = 0;
        gw_send_keepalive(slot, t);
    }
}

/* Whole HTTP/1.1 responses in the request connection's buffer, by Content-Length or by the
 * chunked terminator, as bench/leanload.py's Framer. */
static void gw_frame(size_t slot) {
    Gw *g = &gws[slot];
    Conn *c = &g->u;
    uint16_t epoch = c->epoch;
    size_t at = 0;
    while (c->epoch == epoch) {
        char *b = c->buf + at;
        size_t len = c->len - at;
        char *end = memmem(b, len, "\r\n\r\n", 4);
        if (!end) break;
        size_t hl = (size_t)(end - b), need;
        int ok = hl >= 12 && memcmp(b, "HTTP/1.1 200", 12) == 0;
        char *cl = memmem(b, hl, "Content-Length: ", 16);
        const char *body = b + hl + 4;
        size_t blen;
        if (cl) {
            blen = (size_t)strtoul(cl + 16, NULL, 10);
            need = hl + 4 + blen;
            if (len < need) break;
        } else {
            char *last = memmem(b + hl, len - hl, "\r\n0\r\n\r\n", 7);
            if (!last) break;
            need = (size_t)(last - b) + 7;
            blen = need > hl + 4 ? need - hl - 4 : 0;
        }
        at += need;
        gw_answered(slot, ok, body, blen);
    }
    if (c->epoch == epoch && at) {
        memmove(c->buf, c->buf + at, c->len - at);
        c->len -= at;
    }
}

static void gw_close(size_t slot) {
    Gw *g = &gws[slot];
    if (g->used && !g->started && !g->failed) starting--;
    conn_close(&g->u, 0);
    conn_close(&g->w, 0);
    g->used = 0;
    g->gen++;                                        /* its timers are dropped when due */
}

static void gw_start(size_t slot) {
    Gw *g = &gws[slot];
    starting++;
    if (conn_open(&g->u, slot, 0) < 0) start_done(slot, 0, strerror(errno));
}

static void on_event(uint64_t data, uint32_t events) {
    size_t slot = (size_t)(data >> 17);
    int watch = (int)((data >> 16) & 1);
    uint16_t epoch = (uint16_t)(data & 0xFFFF);
    if (slot >= ngw) return;
    Gw *g = &gws[slot];
    Conn *c = watch ? &g->w : &g->u;
    if (!g->used || c->epoch != epoch || c->fd < 0) return;     /* stale */
    double t = now();
    if (c->state == CONNECTING) {
        int err = 0;
        socklen_t el = sizeof err;
        getsockopt(c->fd, SOL_SOCKET, SO_ERROR, &err, &el);
        if (err || (events & (EPOLLERR | EPOLLHUP))) {
            if (watch) { reconnect_failed++; conn_close(c, 0); return; }
            if (g->started) { reconnect_failed++; conn_close(c, 0); return; }
            start_done(slot, 0, strerror(err ? err : ECONNREFUSED));
            return;
        }
        c->state = UP;
        struct epoll_event ev = {.events = EPOLLIN, .data.u64 = data};
        epoll_ctl(efd, EPOLL_CTL_MOD, c->fd, &ev);
        if (watch) {
            const Str *req = &eps[g->ep].watch;
            if (conn_write(c, req->s, req->len) < 0) conn_close(c, 1);
        } else if (!g->started) {
            if (start_mix) gw_send(slot, OUT_FIRST, &eps[g->ep].first, t);
            else gw_send(slot, OUT_GRANT, &eps[g->ep].grant, t);
        }
        return;
    }
    if (watch) {
        char scratch[16384];
        for (;;) {
            ssize_t n = read(c->fd, scratch, sizeof scratch);
            if (n > 0) {
                watch_bytes += n;
                g->proof = t;
                if ((size_t)n < sizeof scratch) return;   /* drained (epoll is level-triggered) */
                continue;
            }
            if (n < 0 && (errno == EAGAIN || errno == EINTR)) return;
            conn_close(c, 0);                        /* the stream ended: open it again */
            if (conn_open(c, slot, 1) < 0) reconnect_failed++;
            return;
        }
    }
    for (;;) {
        c->buf = grow(c->buf, &c->cap, c->len + 8192, 1);
        size_t room = c->cap - c->len;
        ssize_t n = read(c->fd, c->buf + c->len, room);
        if (n > 0) {
            c->len += (size_t)n;
            if ((size_t)n < room) break;             /* drained: no second read for EAGAIN */
            continue;
        }
        if (n < 0 && errno == EINTR) continue;
        if (n < 0 && errno == EAGAIN) break;
        gw_frame(slot);                              /* what arrived before the end counts */
        if (c->epoch == epoch) gw_lost(slot, t, 0);
        return;
    }
    gw_frame(slot);
}

/* Requests out longer than the bound fail and their connections are replaced. */
static void sweep(double t) {
    for (size_t i = 0; i < ngw; i++) {
        Gw *g = &gws[i];
        if (!g->used || g->out == OUT_NONE) continue;
        if (!g->started) {
            if (t - g->sent > GRANT_BOUND) start_done(i, 0, "no answer to a start request");
        } else if (t - g->sent > BOUND) {
            gw_lost(i, t, 1);
        }
    }
}

/* ------------------------------------------------------------ commands */

static void cmd_set(long count, int k) {
    if (k != kind) {
        for (size_t i = 0; i < ngw; i++) if (gws[i].used) gw_close(i);
        ngw = 0;
        kind = k;
    }
    while (ngw > (size_t)count) gw_close(--ngw);
    nstartq = startq_at = 0;
    while (ngw < (size_t)count) {
        gws = grow(gws, &capgw, ngw + 1, sizeof *gws);
        if (ngw >= inited) {                         /* a slot never used before */
            memset(&gws[ngw], 0, sizeof *gws);
            inited = ngw + 1;
        }
        Gw *g = &gws[ngw];                           /* a reused slot keeps its counters */
        Conn u = g->u, w = g->w;
        uint32_t gen = g->gen + 1;
        memset(g, 0, sizeof *g);
        g->gen = gen;
        g->used = 1;
        g->ep = (int)((first_index + (long)ngw) % neps);
        g->u = (Conn){-1, DOWN, (uint16_t)(u.epoch + 1), u.buf, 0, u.cap};
        g->w = (Conn){-1, DOWN, (uint16_t)(w.epoch + 1), NULL, 0, 0};
        startq = grow(startq, &capstartq, nstartq + 1, sizeof *startq);
        startq[nstartq++] = ngw;
        ngw++;
    }
    pending_set = 1;
}

static void fmt_window(Str *o) {
    double sys, cpu = cpu_seconds(&sys);
    size_t polls = 0, failed = 0, over = 0, late_over = 0, keep = 0, behind = 0;
    double late_max = 0.0;
    o->len = 0;
    sadd(o, "{\"kind\": \"window\", \"lat_ms\": [");
    for (size_t i = 0; i < nrec; i++) {
        Rec *r = &recs[i];
        if (r->sent >= win_t0 && r->sent < win_t1 && r->ok == BEHIND) {
            behind++;
        } else if (r->sent >= win_t0 && r->sent < win_t1) {
            sadd(o, polls ? ",%.3f" : "%.3f", r->lat * 1000.0);
            polls++;
            if (!r->ok) failed++;
            if (r->lat > BOUND) over++;
            if (r->late > late_max) late_max = r->late;
            if (r->late > 0.1) late_over++;
        }
        if (r->sent >= win_t1) recs[keep++] = *r;
    }
    nrec = keep;
    sadd(o, "], \"polls\": %zu, \"failed\": %zu, \"over\": %zu, \"late_ms_max\": %.1f, "
            "\"late_over_100ms\": %zu, \"requests\": %ld, \"gen_cpu_s\": %.6f, "
            "\"gen_sys_s\": %.6f, \"skipped\": %ld, \"keepalive_failed\": %ld, "
            "\"watch_bytes\": %lld, \"proven\": %ld, \"behind\": %zu, "
            "\"reconnect_failed\": %ld, \"start_failed\": %ld, \"generator\": \"c\"}",
         polls, failed, over, late_max * 1000.0, late_over, requests - mark_requests,
         cpu - mark_cpu, sys - mark_sys, skipped, keepalive_failed, watch_bytes,
         proven_in(win_t0, win_t1), behind, reconnect_failed,
         start_failed);
}

static void command(const char *line) {
    char cmd[32];
    if (!jstr_at(jfind(line, "cmd"), cmd, sizeof cmd)) return;
    if (strcmp(cmd, "set") == 0) {
        char k[16] = "mix";
        const char *kp = jfind(line, "kind");
        if (kp && !jstr_at(kp, k, sizeof k)) k[0] = 0;
        long count = (long)jnum(line, "count", -1);
        if (count < 0 || (strcmp(k, "mix") != 0 && strcmp(k, "naive") != 0)) {
            emit_error("bad set command (count >= 0, kind mix or naive): %.200s", line);
            return;
        }
        cmd_set(count, strcmp(k, "naive") == 0 ? NAIVE : MIX);
    } else if (strcmp(cmd, "mark") == 0) {
        mark_requests = requests;
        mark_cpu = cpu_seconds(&mark_sys);
        emit("{\"kind\": \"mark\"}");
    } else if (strcmp(cmd, "window") == 0) {
        win_t0 = jnum(line, "t0", 0);
        win_t1 = jnum(line, "t1", 0);
        double t = now();
        win_reply_at = (win_t1 > t ? win_t1 : t) + BOUND + 0.2;
        pending_window = 1;
    }
}

static void read_stdin(void) {
    for (;;) {
        if (inlen == sizeof inbuf) inlen = 0;        /* a line this long is not ours: drop */
        ssize_t n = read(0, inbuf + inlen, sizeof inbuf - inlen);
        if (n > 0) { inlen += (size_t)n; continue; }
        if (n < 0 && errno == EINTR) continue;
        if (n < 0 && errno == EAGAIN) return;
        stdin_open = 0;
        epoll_ctl(efd, EPOLL_CTL_DEL, 0, NULL);
        return;
    }
}

/* Commands run one at a time: the next line waits while a set or a window is answering. */
static void run_commands(void) {
    while (!pending_set && !pending_window) {
        char *nl = memchr(inbuf, '\n', inlen);
        if (!nl) return;
        *nl = 0;
        command(inbuf);
        size_t used = (size_t)(nl - inbuf) + 1;
        memmove(inbuf, inbuf + used, inlen - used);
        inlen -= used;
    }
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: leanload '<json spec>'\n");
        return 2;
    }
    const char *spec = argv[1];
    signal(SIGPIPE, SIG_IGN);
    struct rlimit nofile;                            /* two sockets per gateway */
    if (getrlimit(RLIMIT_NOFILE, &nofile) == 0 && nofile.rlim_cur < nofile.rlim_max) {
        nofile.rlim_cur = nofile.rlim_max;
        setrlimit(RLIMIT_NOFILE, &nofile);
    }
    char key[256];
    if (!jstr_at(jfind(spec, "registry_key_b64"), key, sizeof key)) {
        fprintf(stderr, "leanload: the spec has no registry_key_b64 string\n");
        return 2;
    }
    long rev = (long)jnum(spec, "registry_mod_revision", -1);
    if (rev < 0) { fprintf(stderr, "leanload: the spec has no registry_mod_revision\n"); return 2; }
    first_index = (long)jnum(spec, "first", 0);
    interval = jnum(spec, "interval", 1.0);
    if (jstr_at(jfind(spec, "record_prefix"), record_prefix, sizeof record_prefix)) {
        unsigned char value[256];
        memset(value, 'r', sizeof value);
        b64(value, sizeof value, record_value_b64);
        start_mix = 1;
    }
    lease_ttl = (int)jnum(spec, "lease_ttl", -1);
    if (lease_ttl < 0) {
        fprintf(stderr, "leanload: the spec has no lease_ttl (the gateway's, e.g. 30: "
                        "bench.cgen.spec gives the gateway config's default)\n");
        return 2;
    }
    if (interval <= 0 || lease_ttl < 1) {
        fprintf(stderr, "leanload: interval must be > 0 and lease_ttl >= 1\n");
        return 2;
    }
    ka_every = lease_ttl / 3.0;
    if (parse_parts(spec) < 0) return 2;
    rng_state = (uint64_t)jnum(spec, "seed", 1) * 0x2545F4914F6CDD1DULL + 1;
    const char *p = jfind(spec, "endpoints");
    if (!p || *p != '[') { fprintf(stderr, "leanload: the spec has no endpoints list\n"); return 2; }
    p++;
    while (*p && *p != ']') {
        while (*p == ' ' || *p == ',') p++;
        if (*p == ']') break;
        char url[120];
        p = jstr_at(p, url, sizeof url);
        if (!p || neps == MAX_EPS) { fprintf(stderr, "leanload: bad endpoints list\n"); return 2; }
        setup_endpoint(&eps[neps++], url, key, rev);
    }
    if (!neps) { fprintf(stderr, "leanload: no endpoints\n"); return 2; }

    efd = epoll_create1(EPOLL_CLOEXEC);
    if (efd < 0) die("epoll_create1");
    fcntl(0, F_SETFL, fcntl(0, F_GETFL) | O_NONBLOCK);
    struct epoll_event sev = {.events = EPOLLIN, .data.u64 = UINT64_MAX};
    if (epoll_ctl(efd, EPOLL_CTL_ADD, 0, &sev) < 0) die("epoll stdin");
    emit("{\"kind\": \"hello\"}");

    Str out = {0};
    struct epoll_event evs[512];
    double next_sweep = now() + SWEEP;
    for (;;) {
        double t = now();
        while (nheap && heap[0].due <= t) {
            Timer tm = timer_pop();
            if (tm.slot >= ngw) continue;
            Gw *g = &gws[tm.slot];
            if (!g->used || g->gen != tm.gen || !g->started) continue;
            if (tm.what == T_POLL) gw_poll(tm.slot, tm.due);
            else gw_keepalive(tm.slot, tm.due);
        }
        t = now();
        if (t >= next_sweep) { sweep(t); next_sweep = t + SWEEP; }
        if (pending_window && t >= win_reply_at) {
            fmt_window(&out);
            emit(out.s);
            pending_window = 0;
        }
        while (starting < START_BATCH && startq_at < nstartq) gw_start(startq[startq_at++]);
        if (pending_set && !starting && startq_at == nstartq) {
            char line[64];
            snprintf(line, sizeof line, "{\"kind\": \"set\", \"count\": %zu}", ngw);
            emit(line);
            pending_set = 0;
        }
        run_commands();
        if (!stdin_open && !pending_set && !pending_window && !memchr(inbuf, '\n', inlen)) break;

        double wake = next_sweep;
        if (nheap && heap[0].due < wake) wake = heap[0].due;
        if (pending_window && win_reply_at < wake) wake = win_reply_at;
        double left = wake - now();
        int ms = left <= 0 ? 0 : (int)(left * 1000.0) + 1;
        int n = epoll_wait(efd, evs, 512, ms);
        if (n < 0 && errno != EINTR) die("epoll_wait");
        for (int i = 0; i < n; i++) {
            if (evs[i].data.u64 == UINT64_MAX) read_stdin();
            else on_event(evs[i].data.u64, evs[i].events);
        }
    }
    for (size_t i = 0; i < ngw; i++) if (gws[i].used) gw_close(i);
    return 0;
}
