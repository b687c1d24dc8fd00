/* tandem-loadgen: a Proton C (proactor) load generator for AMQP 1.0 brokers. N
 * senders and N receivers, one connection each, on one queue; at-least-once with a
 * window of unsettled sends and a receiver credit window; for a duration or a count.
 * Prints one JSON line: what was sent, accepted, received, lost, duplicated, how
 * long it took, and every error. Exit status 0 only if nothing went wrong. */
#include "errors.h"
#include "options.h"
#include "run.h"

#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <stdio.h>
#include <sys/resource.h>
#include <unistd.h>

typedef struct totals {
  uint64_t sent, accepted, rejected, released, modified, other_outcome, unsettled;
  uint64_t received, duplicates, foreign, unchecked, lost;
} totals_t;

static uint64_t get(peer_t *p, size_t field) { return atomic_load((_Atomic uint64_t *)((char *)p + field)); }
#define GET(p, field) get((p), offsetof(peer_t, field))

/* Lost: accepted by the broker, never seen by a receiver. Bounded by what was sent. */
static uint64_t count_lost(run_t *r, peer_t *s) {
  uint64_t lost = 0;
  uint64_t sent = GET(s, sent);
  for (uint64_t seq = 0; seq < sent && seq < SEQSET_MAX_BITS; seq++) {
    if (seqset_has(&s->accepted_seqs, seq) && !seqset_has(&r->seen[s->index], seq)) lost++;
  }
  return lost;
}

static totals_t add_up(run_t *r) {
  totals_t t = {0};
  for (int i = 0; i < r->o->senders; i++) {
    peer_t *s = &r->senders[i];
    t.sent += GET(s, sent);
    t.accepted += GET(s, accepted);
    t.rejected += GET(s, rejected);
    t.released += GET(s, released);
    t.modified += GET(s, modified);
    t.other_outcome += GET(s, other_outcome);
    uint64_t settled = GET(s, settled); /* first: see tick() in run.c */
    t.unsettled += GET(s, sent) - settled;
    t.lost += count_lost(r, s);
  }
  for (int i = 0; i < r->o->receivers; i++) {
    peer_t *p = &r->receivers[i];
    t.received += GET(p, received);
    t.duplicates += GET(p, duplicates);
    t.foreign += GET(p, foreign);
    t.unchecked += GET(p, unchecked);
  }
  return t;
}

static uint64_t last_receive_ns(run_t *r) {
  uint64_t last = 0;
  for (int i = 0; i < r->o->receivers; i++) {
    uint64_t v = GET(&r->receivers[i], last_receive_ns);
    if (v > last) last = v;
  }
  return last;
}

static double cpu_seconds(void) {
  struct rusage u;
  if (getrusage(RUSAGE_SELF, &u) != 0) return -1;
  return (double)(u.ru_utime.tv_sec + u.ru_stime.tv_sec) + (double)(u.ru_utime.tv_usec + u.ru_stime.tv_usec) / 1e6;
}

static void report(run_t *r, const options_t *o) {
  totals_t t = add_up(r);
  /* Anything a correct run does not produce is an error, so exit status and
   * "errors" tell a caller at once whether the numbers can be used. */
  if (t.rejected || t.released || t.modified || t.other_outcome)
    errors_add("outcomes other than accepted: rejected %llu released %llu modified %llu other %llu", (unsigned long long)t.rejected,
               (unsigned long long)t.released, (unsigned long long)t.modified, (unsigned long long)t.other_outcome);
  if (!t.sent) errors_add("no message sent (no credit from the broker within the run?)");
  if (t.lost) errors_add("%llu accepted messages never received", (unsigned long long)t.lost);
  if (t.foreign) errors_add("%llu received messages were not this run's", (unsigned long long)t.foreign);
  uint64_t start = r->start_ns;
  uint64_t stop = r->stop_ns ? r->stop_ns : start;
  uint64_t last = last_receive_ns(r);
  double send_s = start ? (double)(stop - start) / 1e9 : 0;
  double elapsed_s = start && last > start ? (double)(last - start) / 1e9 : send_s;
  FILE *out = stdout;
  fprintf(out, "{\"client\":\"proton-c\",\"broker\":");
  json_write_string(out, r->proactor_address, sizeof r->proactor_address);
  fprintf(out, ",\"queue\":");
  json_write_string(out, o->queue, sizeof o->queue);
  fprintf(out, ",\"durable\":%s,\"senders\":%d,\"receivers\":%d,\"size\":%zu,\"window\":%d,\"credit\":%d,\"threads\":%d", o->durable ? "true" : "false",
          o->senders, o->receivers, o->size, o->window, o->credit, o->threads);
  fprintf(out, ",\"sent\":%llu,\"accepted\":%llu,\"rejected\":%llu,\"released\":%llu,\"modified\":%llu,\"unsettled\":%llu",
          (unsigned long long)t.sent, (unsigned long long)t.accepted, (unsigned long long)t.rejected, (unsigned long long)t.released,
          (unsigned long long)t.modified, (unsigned long long)t.unsettled);
  fprintf(out, ",\"received\":%llu,\"duplicates\":%llu,\"lost\":%llu,\"foreign\":%llu,\"unchecked\":%llu", (unsigned long long)t.received,
          (unsigned long long)t.duplicates, (unsigned long long)t.lost, (unsigned long long)t.foreign, (unsigned long long)t.unchecked);
  if (o->rate > 0) fprintf(out, ",\"rate\":%ld", o->rate);
  fprintf(out, ",\"duration\":%.3f,\"elapsed\":%.3f,\"throughput\":%.0f,\"clientCpuSeconds\":%.3f", send_s, elapsed_s,
          elapsed_s > 0 ? (double)t.received / elapsed_s : 0.0, cpu_seconds());
  fprintf(out, ",\"errorCount\":%llu,\"errors\":", (unsigned long long)errors_count());
  errors_write_json(out);
  fprintf(out, "}\n");
  fflush(out);
}

/* The run a SIGTERM finds unfinished (the test harness's timeout): where it stood is
 * written to stderr before the process goes, so a hang says which phase stopped. */
static run_t *running;

static void on_term(int sig) {
  (void)sig;
  char line[256];
  run_t *r = running;
  uint64_t sent = 0, settled = 0, received = 0;
  int phase = -1;
  if (r) {
    phase = atomic_load(&r->phase);
    for (int i = 0; i < r->o->senders; i++) sent += GET(&r->senders[i], sent), settled += GET(&r->senders[i], settled);
    for (int i = 0; i < r->o->receivers; i++) received += GET(&r->receivers[i], received);
  }
  int n = snprintf(line, sizeof line, "tandem-loadgen: terminated in phase %d (0 attaching receivers .. 5 closing, 6 done): sent %llu, settled %llu, received %llu\n", phase,
                   (unsigned long long)sent, (unsigned long long)settled, (unsigned long long)received);
  if (n > 0) (void)!write(2, line, (size_t)n < sizeof line ? (size_t)n : sizeof line - 1);
  _exit(3);
}

int main(int argc, char **argv) {
  static options_t o;
  char err[512];
  if (options_parse(&o, argc, argv, err, sizeof err) != 0) {
    bool help = strncmp(err, "help", 4) == 0;
    if (!help) fprintf(stderr, "tandem-loadgen: %s\n", err);
    options_usage(help ? stdout : stderr);
    return help ? 0 : 2;
  }
  static run_t r; /* large (peers, bitmaps' heads): not on the stack */
  running = &r;
  signal(SIGTERM, on_term);
  if (run_init(&r, &o) == 0) run_serve(&r);
  report(&r, &o);
  run_free(&r);
  return errors_count() ? 1 : 0;
}
