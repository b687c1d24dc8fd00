/* Command line of the load generator: what to run against which broker. */
#ifndef LOADGEN_OPTIONS_H
#define LOADGEN_OPTIONS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#define LOADGEN_MAX_PEERS 64      /* senders (and receivers) at most */
#define LOADGEN_ADDRESS_MAX 256

typedef struct options {
  const char *host;
  const char *port;
  const char *user;       /* NULL: SASL ANONYMOUS */
  const char *password;
  char queue[128];
  char send_address[LOADGEN_ADDRESS_MAX];   /* the template with {q} replaced */
  char recv_address[LOADGEN_ADDRESS_MAX];
  bool terminus_durable;  /* ask for durable=2 termini (RabbitMQ then declares a durable queue) */
  bool durable;           /* header durable=true on every message */
  bool message_id;        /* a message-id on every message, unique per run, sender and sequence */
  bool message_id_string; /* that id a string shaped like qpid-jms's (ID:<uuid>:1:1:1-<n>), not a ulong */
  bool jms_shape;         /* the sections qpid-jms writes for a BytesMessage with three properties */
  uint64_t id_base;       /* this run's high bits of every message-id (random per run) */
  int senders;
  int receivers;
  double duration;        /* seconds of sending, unless count is set */
  uint64_t count;         /* messages per sender; 0: use duration */
  int window;             /* unsettled sends per sender */
  long rate;              /* messages per second for all senders together; 0: as fast as credit allows */
  int credit;             /* receiver credit window */
  size_t size;            /* body bytes */
  int threads;            /* threads serving the proactor */
  double connect_timeout; /* seconds until every link is attached */
  double settle_timeout;  /* seconds for outstanding settlements once sending stops */
  double drain_timeout;   /* seconds for receivers to get what was accepted */
  double time_limit;      /* seconds of sending at most in count mode */
} options_t;

/* Fills `o` from argv; on a bad command line returns -1 with a reason in `err`. */
int options_parse(options_t *o, int argc, char **argv, char *err, size_t errlen);
void options_usage(FILE *out);

#endif
