/* Parses and range-checks the command line; every number has bounds, every
 * string a maximum length, so a run's shape is known before anything connects. */
#include "options.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

void options_usage(FILE *out) {
  fputs(
      "tandem-loadgen [options]: N senders and N receivers on one queue, JSON result on stdout\n"
      "  --host H               broker host [127.0.0.1]\n"
      "  --port P               broker port [5672]\n"
      "  --user U --password P  SASL PLAIN (default: SASL ANONYMOUS)\n"
      "  --queue Q              queue name [loadgen-<random>]\n"
      "  --send-address A       sender target, {q} is the queue [{q}] (RabbitMQ 3.10: /amq/queue/{q})\n"
      "  --recv-address A       receiver source, {q} is the queue [{q}] (RabbitMQ 3.10: /queue/{q})\n"
      "  --terminus-durable     durable termini (durable=2)\n"
      "  --durable              messages with header durable=true\n"
      "  --message-id           a ulong message-id on every message (unique per run: duplicate detection)\n"
      "  --message-id-string    the message-id a 62-character string shaped like qpid-jms's instead\n"
      "  --jms-shape            the other sections as qpid-jms writes a BytesMessage with three properties\n"
      "  --senders N            sender connections, 1-64 [1]\n"
      "  --receivers N          receiver connections, 1-64 [same as --senders]\n"
      "  --duration S           seconds of sending, 0.1-600 [10] (unless --count)\n"
      "  --count N              messages per sender (0: use --duration) [0]\n"
      "  --window N             unsettled sends per sender, 1-100000 [1000]\n"
      "  --rate N               messages per second, all senders together, 1-10000000 (default: no limit)\n"
      "  --credit N             receiver credit, 1-100000 [1000]\n"
      "  --size N               body bytes, 16-1048576 [1024]\n"
      "  --threads N            threads serving the connections, 1-16 [1]\n"
      "  --connect-timeout S    [20]  --settle-timeout S [30]  --drain-timeout S [20]\n"
      "  --time-limit S         seconds of sending at most with --count [300]\n",
      out);
}

static int fail(char *err, size_t errlen, const char *what, const char *value) {
  snprintf(err, errlen, "%s: '%s'", what, value ? value : "(missing)");
  return -1;
}

static bool parse_long(const char *s, long min, long max, long *out) {
  if (!s || !*s) return false;
  char *end = NULL;
  errno = 0;
  long v = strtol(s, &end, 10);
  if (errno || *end || v < min || v > max) return false;
  *out = v;
  return true;
}

static bool parse_seconds(const char *s, double min, double max, double *out) {
  if (!s || !*s) return false;
  char *end = NULL;
  errno = 0;
  double v = strtod(s, &end);
  if (errno || *end || !isfinite(v) || v < min || v > max) return false;
  *out = v;
  return true;
}

/* Replaces every {q} in `template` by the queue name; false if it does not fit. */
static bool expand_address(const char *template, const char *queue, char *out, size_t cap) {
  size_t n = 0;
  size_t qlen = strlen(queue);
  for (const char *p = template; *p; p++) {
    if (p[0] == '{' && p[1] == 'q' && p[2] == '}') {
      if (n + qlen >= cap) return false;
      memcpy(out + n, queue, qlen);
      n += qlen;
      p += 2;
    } else {
      if (n + 1 >= cap) return false;
      out[n++] = *p;
    }
  }
  out[n] = '\0';
  return n > 0;
}

static const char *const VALUE_OPTIONS[] = {
    "--host", "--port", "--user", "--password", "--queue", "--send-address", "--recv-address", "--senders", "--receivers", "--duration",
    "--count", "--window", "--rate", "--credit", "--size", "--threads", "--connect-timeout", "--settle-timeout", "--drain-timeout", "--time-limit",
};

static bool is_value_option(const char *a) {
  for (size_t i = 0; i < sizeof VALUE_OPTIONS / sizeof VALUE_OPTIONS[0]; i++) {
    if (!strcmp(a, VALUE_OPTIONS[i])) return true;
  }
  return false;
}

int options_parse(options_t *o, int argc, char **argv, char *err, size_t errlen) {
  memset(o, 0, sizeof *o);
  o->host = "127.0.0.1";
  o->port = "5672";
  o->senders = 1;
  o->receivers = 0;
  o->duration = 10;
  o->window = 1000;
  o->credit = 1000;
  o->size = 1024;
  o->threads = 1;
  o->connect_timeout = 20;
  o->settle_timeout = 30;
  o->drain_timeout = 20;
  o->time_limit = 300;
  const char *queue = NULL;
  const char *send_template = "{q}";
  const char *recv_template = "{q}";

  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    const char *v = i + 1 < argc ? argv[i + 1] : NULL;
    long n = 0;
    bool takes_value = true;
    if (!strcmp(a, "--terminus-durable")) {
      o->terminus_durable = true;
      takes_value = false;
    } else if (!strcmp(a, "--durable")) {
      o->durable = true;
      takes_value = false;
    } else if (!strcmp(a, "--message-id")) {
      o->message_id = true;
      takes_value = false;
    } else if (!strcmp(a, "--message-id-string")) {
      o->message_id = true;
      o->message_id_string = true;
      takes_value = false;
    } else if (!strcmp(a, "--jms-shape")) {
      o->jms_shape = true;
      takes_value = false;
    } else if (!strcmp(a, "--help")) {
      return fail(err, errlen, "help", a);
    } else if (!is_value_option(a)) {
      return fail(err, errlen, "unknown option", a);
    } else if (!v) {
      return fail(err, errlen, "option without a value", a);
    } else if (!strcmp(a, "--host")) {
      o->host = v;
    } else if (!strcmp(a, "--port")) {
      if (!parse_long(v, 1, 65535, &n)) return fail(err, errlen, "--port must be 1-65535", v);
      o->port = v;
    } else if (!strcmp(a, "--user")) {
      o->user = *v ? v : NULL;
    } else if (!strcmp(a, "--password")) {
      o->password = v;
    } else if (!strcmp(a, "--queue")) {
      queue = v;
    } else if (!strcmp(a, "--send-address")) {
      send_template = v;
    } else if (!strcmp(a, "--recv-address")) {
      recv_template = v;
    } else if (!strcmp(a, "--senders")) {
      if (!parse_long(v, 1, LOADGEN_MAX_PEERS, &n)) return fail(err, errlen, "--senders must be 1-64", v);
      o->senders = (int)n;
    } else if (!strcmp(a, "--receivers")) {
      if (!parse_long(v, 1, LOADGEN_MAX_PEERS, &n)) return fail(err, errlen, "--receivers must be 1-64", v);
      o->receivers = (int)n;
    } else if (!strcmp(a, "--duration")) {
      if (!parse_seconds(v, 0.1, 600, &o->duration)) return fail(err, errlen, "--duration must be 0.1-600 seconds", v);
    } else if (!strcmp(a, "--count")) {
      if (!parse_long(v, 0, 1000000000L, &n)) return fail(err, errlen, "--count must be 0-1000000000", v);
      o->count = (uint64_t)n;
    } else if (!strcmp(a, "--window")) {
      if (!parse_long(v, 1, 100000, &n)) return fail(err, errlen, "--window must be 1-100000", v);
      o->window = (int)n;
    } else if (!strcmp(a, "--rate")) {
      if (!parse_long(v, 1, 10000000L, &n)) return fail(err, errlen, "--rate must be 1-10000000", v);
      o->rate = n;
    } else if (!strcmp(a, "--credit")) {
      if (!parse_long(v, 1, 100000, &n)) return fail(err, errlen, "--credit must be 1-100000", v);
      o->credit = (int)n;
    } else if (!strcmp(a, "--size")) {
      if (!parse_long(v, 16, 1 << 20, &n)) return fail(err, errlen, "--size must be 16-1048576", v);
      o->size = (size_t)n;
    } else if (!strcmp(a, "--threads")) {
      if (!parse_long(v, 1, 16, &n)) return fail(err, errlen, "--threads must be 1-16", v);
      o->threads = (int)n;
    } else if (!strcmp(a, "--connect-timeout")) {
      if (!parse_seconds(v, 0.1, 600, &o->connect_timeout)) return fail(err, errlen, "--connect-timeout must be 0.1-600", v);
    } else if (!strcmp(a, "--settle-timeout")) {
      if (!parse_seconds(v, 0.1, 600, &o->settle_timeout)) return fail(err, errlen, "--settle-timeout must be 0.1-600", v);
    } else if (!strcmp(a, "--drain-timeout")) {
      if (!parse_seconds(v, 0.1, 600, &o->drain_timeout)) return fail(err, errlen, "--drain-timeout must be 0.1-600", v);
    } else if (!strcmp(a, "--time-limit")) {
      if (!parse_seconds(v, 1, 3600, &o->time_limit)) return fail(err, errlen, "--time-limit must be 1-3600", v);
    }
    if (takes_value) i++;
  }
  if (o->receivers == 0) o->receivers = o->senders;
  if (o->message_id) {
    /* The top 24 bits differ per run (a broker's window outlives a run), the next 8 are
     * the sender, the low 32 the sequence: ids repeat only if two runs draw the same bits. */
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    uint64_t seed = ((uint64_t)ts.tv_nsec * 2654435761u) ^ (uint64_t)ts.tv_sec ^ ((uint64_t)getpid() << 16);
    o->id_base = (seed & 0xffffffu) << 40;
  }
  if (strlen(o->host) == 0 || strlen(o->host) > 253) return fail(err, errlen, "--host must be 1-253 characters", o->host);
  if (o->user && !o->password) return fail(err, errlen, "--user needs --password", o->user);

  if (queue) {
    if (strlen(queue) == 0 || strlen(queue) >= sizeof o->queue) return fail(err, errlen, "--queue must be 1-127 characters", queue);
    strcpy(o->queue, queue);
  } else {
    /* Unique per run, so loads never share a queue with an earlier one's leftovers. */
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    snprintf(o->queue, sizeof o->queue, "loadgen-%ld-%lx", (long)getpid(), (unsigned long)(ts.tv_nsec ^ ts.tv_sec));
  }
  if (!expand_address(send_template, o->queue, o->send_address, sizeof o->send_address)) return fail(err, errlen, "--send-address empty or too long", send_template);
  if (!expand_address(recv_template, o->queue, o->recv_address, sizeof o->recv_address)) return fail(err, errlen, "--recv-address empty or too long", recv_template);
  return 0;
}
