/* The messages the load generator sends: encoded once per sender by proton, then
 * stamped with a sequence number in place; and reading that stamp back from what a
 * receiver gets (whatever the broker re-encoded around the body). */
#ifndef LOADGEN_MESSAGE_H
#define LOADGEN_MESSAGE_H

#include <proton/message.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* The body is one data section: "TLG1", sender (u32), sequence (u64), big-endian,
 * then filler up to the body size. */
#define MESSAGE_STAMP_SIZE 16

typedef struct message_template {
  char *bytes;
  size_t len;
  size_t seq_offset; /* where the sequence number sits in `bytes` */
  size_t id_offset;  /* where the message-id's 8 bytes (a string id: its last 16 hex digits) sit (0: no message-id) */
  uint64_t id_base;  /* the message-id is id_base | sequence */
  bool id_string;    /* the id is a string ending in id_base | sequence as 16 hex digits */
} message_template_t;

/* 0, or -1 with an error recorded. */
/* id_base 0: no message-id; else every message's id is id_base | sender << 32 | sequence,
 * as a ulong or (id_string) as "ID:<uuid of id_base>:1:1:1-" and that number in 16 hex digits.
 * jms_to: NULL, or the address a JMS producer names: the message then has the sections
 * qpid-jms writes for a BytesMessage with three application properties. */
int message_template_init(message_template_t *t, bool durable, size_t body_size, uint32_t sender, uint64_t id_base, bool id_string, const char *jms_to);
void message_template_free(message_template_t *t);
void message_stamp(message_template_t *t, uint64_t seq);
/* 0 and the stamp, or -1 if the bytes are not a message of ours. `scratch` is reused. */
int message_read_stamp(pn_message_t *scratch, const char *bytes, size_t len, uint32_t *sender, uint64_t *seq);

#endif
