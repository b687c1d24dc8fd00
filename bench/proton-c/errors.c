#include "errors.h"

#include <pthread.h>
#include <stdarg.h>
#include <string.h>

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static char kept[LOADGEN_ERRORS_KEPT][LOADGEN_ERROR_TEXT];
static uint64_t total;

void errors_add(const char *fmt, ...) {
  char text[LOADGEN_ERROR_TEXT];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(text, sizeof text, fmt, ap); /* truncates: a long description is cut, not overflowed */
  va_end(ap);
  pthread_mutex_lock(&lock);
  if (total < LOADGEN_ERRORS_KEPT) memcpy(kept[total], text, sizeof text);
  total++;
  pthread_mutex_unlock(&lock);
}

uint64_t errors_count(void) {
  pthread_mutex_lock(&lock);
  uint64_t n = total;
  pthread_mutex_unlock(&lock);
  return n;
}

void json_write_string(FILE *out, const char *s, size_t max) {
  fputc('"', out);
  for (size_t i = 0; i < max && s[i]; i++) {
    unsigned char c = (unsigned char)s[i];
    if (c == '"' || c == '\\') fprintf(out, "\\%c", c);
    else if (c < 0x20 || c >= 0x7f) fprintf(out, "\\u%04x", c); /* bytes, not decoded UTF-8: always valid JSON */
    else fputc(c, out);
  }
  fputc('"', out);
}

void errors_write_json(FILE *out) {
  pthread_mutex_lock(&lock);
  uint64_t n = total < LOADGEN_ERRORS_KEPT ? total : LOADGEN_ERRORS_KEPT;
  fputc('[', out);
  for (uint64_t i = 0; i < n; i++) {
    if (i) fputc(',', out);
    json_write_string(out, kept[i], sizeof kept[i]);
  }
  fputc(']', out);
  pthread_mutex_unlock(&lock);
}
