#include "message.h"

#include "errors.h"

#include <proton/codec.h>
#include <stdlib.h>
#include <string.h>

static const char MAGIC[4] = {'T', 'L', 'G', '1'};

static void put_be32(unsigned char *p, uint32_t v) {
  for (int i = 3; i >= 0; i--, v >>= 8) p[i] = (unsigned char)v;
}
static void put_be64(unsigned char *p, uint64_t v) {
  for (int i = 7; i >= 0; i--, v >>= 8) p[i] = (unsigned char)v;
}
static uint64_t get_be(const unsigned char *p, int n) {
  uint64_t v = 0;
  for (int i = 0; i < n; i++) v = (v << 8) | p[i];
  return v;
}

/* Where `needle` occurs in `hay`: its offset if exactly once, else -1. */
static long find_once(const char *hay, size_t len, const char *needle, size_t nlen) {
  long found = -1;
  for (size_t i = 0; i + nlen <= len; i++) {
    if (memcmp(hay + i, needle, nlen) == 0) {
      if (found >= 0) return -1;
      found = (long)i;
    }
  }
  return found;
}

/* Marks where a string id's number goes: 16 characters no uuid or number holds. */
static const char ID_STRING_MARKER[16] = {'<', 'S', 'E', 'Q', 'U', 'E', 'N', 'C', 'E', '-', 'M', 'A', 'R', 'K', '>', '!'};

static void put_hex16(char *p, uint64_t v) {
  static const char HEX[] = "0123456789abcdef";
  for (int i = 15; i >= 0; i--, v >>= 4) p[i] = HEX[v & 15];
}

/* What qpid-jms 2.x puts around a BytesMessage's body (AmqpJmsMessageFacade and its
 * BytesMessage subclass): x-opt-jms-msg-type (3: bytes) and x-opt-jms-dest (0: a queue)
 * annotations, to, content-type and creation-time properties, and the application's
 * properties, here three of the kinds applications set. */
static int put_jms_sections(pn_message_t *m, const char *to) {
  pn_data_t *a = pn_message_annotations(m);
  pn_data_put_map(a);
  pn_data_enter(a);
  pn_data_put_symbol(a, pn_bytes(18, "x-opt-jms-msg-type"));
  pn_data_put_byte(a, 3);
  pn_data_put_symbol(a, pn_bytes(14, "x-opt-jms-dest"));
  pn_data_put_byte(a, 0);
  pn_data_exit(a);
  pn_data_t *p = pn_message_properties(m);
  pn_data_put_map(p);
  pn_data_enter(p);
  pn_data_put_string(p, pn_bytes(7, "orderId"));
  pn_data_put_long(p, 4242424242LL);
  pn_data_put_string(p, pn_bytes(6, "region"));
  pn_data_put_string(p, pn_bytes(7, "eu-west"));
  pn_data_put_string(p, pn_bytes(6, "urgent"));
  pn_data_put_bool(p, false);
  pn_data_exit(p);
  if (pn_message_set_address(m, to) != 0 || pn_message_set_content_type(m, "application/octet-stream") != 0) return -1;
  return pn_message_set_creation_time(m, 1765000000000LL);
}

int message_template_init(message_template_t *t, bool durable, size_t body_size, uint32_t sender, uint64_t id_base, bool id_string, const char *jms_to) {
  memset(t, 0, sizeof *t);
  unsigned char *body = malloc(body_size);
  pn_message_t *m = pn_message();
  int rc = -1;
  if (!body || !m) {
    errors_add("out of memory for the message template");
    goto done;
  }
  memcpy(body, MAGIC, 4);
  put_be32(body + 4, sender);
  /* The sequence starts as a marker, found again in the encoded bytes below. */
  memcpy(body + 8, "\xfe\xedSEQ\xfa\xce\x01", 8);
  for (size_t i = MESSAGE_STAMP_SIZE; i < body_size; i++) body[i] = (unsigned char)('a' + i % 26);
  if (pn_message_set_durable(m, durable) != 0) {
    errors_add("pn_message_set_durable failed");
    goto done;
  }
  /* The id starts as a marker too: a ulong this large is encoded in full (0x80 and 8 bytes). */
  static const unsigned char ID_MARKER[8] = {0xd1, 0xd2, 0xd3, 0xd4, 0xd5, 0xd6, 0xd7, 0xd8};
  /* qpid-jms's shape: ID:<connection uuid>:<connection>:<session>:<producer>-<message>. */
  char id_text[80];
  if (id_base && id_string) {
    uint64_t run = id_base >> 40;
    int n = snprintf(id_text, sizeof id_text, "ID:%08x-%04x-4000-8000-%012llx:1:1:1-", (unsigned)run, (unsigned)(sender & 0xffff), (unsigned long long)run);
    memcpy(id_text + n, ID_STRING_MARKER, sizeof ID_STRING_MARKER);
    if (pn_data_put_string(pn_message_id(m), pn_bytes((size_t)n + sizeof ID_STRING_MARKER, id_text)) != 0) {
      errors_add("pn_data_put_string failed");
      goto done;
    }
  } else if (id_base) {
    pn_data_t *id = pn_message_id(m);
    if (pn_data_put_ulong(id, get_be(ID_MARKER, 8)) != 0) {
      errors_add("pn_data_put_ulong failed");
      goto done;
    }
  }
  if (jms_to && put_jms_sections(m, jms_to) != 0) {
    errors_add("setting the JMS sections failed");
    goto done;
  }
  pn_data_t *b = pn_message_body(m);
  if (pn_data_put_binary(b, pn_bytes(body_size, (const char *)body)) != 0) {
    errors_add("pn_data_put_binary failed");
    goto done;
  }
  size_t cap = body_size + 512;
  t->bytes = malloc(cap);
  if (!t->bytes) {
    errors_add("out of memory for the message template");
    goto done;
  }
  size_t len = cap;
  int err = pn_message_encode(m, t->bytes, &len);
  if (err != 0) {
    errors_add("pn_message_encode failed: %d", err);
    goto done;
  }
  long at = find_once(t->bytes, len, (const char *)body, MESSAGE_STAMP_SIZE);
  if (at < 0) {
    errors_add("the encoded message does not hold its body's stamp exactly once");
    goto done;
  }
  if (id_base) {
    const char *marker = id_string ? ID_STRING_MARKER : (const char *)ID_MARKER;
    long id_at = find_once(t->bytes, len, marker, id_string ? sizeof ID_STRING_MARKER : sizeof ID_MARKER);
    if (id_at < 0) {
      errors_add("the encoded message does not hold its message-id marker exactly once");
      goto done;
    }
    t->id_offset = (size_t)id_at;
    t->id_base = id_base | ((uint64_t)(sender & 0xff) << 32);
    t->id_string = id_string;
  }
  t->len = len;
  t->seq_offset = (size_t)at + 8;
  rc = 0;
done:
  if (rc != 0) {
    free(t->bytes);
    t->bytes = NULL;
  }
  free(body);
  if (m) pn_message_free(m);
  return rc;
}

void message_template_free(message_template_t *t) {
  free(t->bytes);
  t->bytes = NULL;
}

void message_stamp(message_template_t *t, uint64_t seq) {
  put_be64((unsigned char *)t->bytes + t->seq_offset, seq);
  if (t->id_offset && t->id_string) put_hex16(t->bytes + t->id_offset, t->id_base | (seq & 0xffffffffu));
  else if (t->id_offset) put_be64((unsigned char *)t->bytes + t->id_offset, t->id_base | (seq & 0xffffffffu));
}

int message_read_stamp(pn_message_t *scratch, const char *bytes, size_t len, uint32_t *sender, uint64_t *seq) {
  pn_message_clear(scratch);
  if (pn_message_decode(scratch, bytes, len) != 0) return -1;
  pn_data_t *b = pn_message_body(scratch);
  pn_data_rewind(b);
  if (!pn_data_next(b) || pn_data_type(b) != PN_BINARY) return -1;
  pn_bytes_t v = pn_data_get_binary(b);
  if (v.size < MESSAGE_STAMP_SIZE || memcmp(v.start, MAGIC, 4) != 0) return -1;
  *sender = (uint32_t)get_be((const unsigned char *)v.start + 4, 4);
  *seq = get_be((const unsigned char *)v.start + 8, 8);
  return 0;
}
