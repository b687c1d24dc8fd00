/* What went wrong during a run, from any thread: every error is counted, the first
 * few are kept as text for the JSON result. */
#ifndef LOADGEN_ERRORS_H
#define LOADGEN_ERRORS_H

#include <stdint.h>
#include <stdio.h>

#define LOADGEN_ERRORS_KEPT 16
#define LOADGEN_ERROR_TEXT 240

/* printf-style; text from the broker (conditions, descriptions) is welcome here:
 * errors_write_json escapes it. */
void errors_add(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
uint64_t errors_count(void);
/* A JSON array of the kept texts. */
void errors_write_json(FILE *out);
/* A JSON string literal of `s` (at most `max` bytes of it): quotes, backslashes,
 * control and non-ASCII bytes escaped, so broker-supplied text cannot break the line. */
void json_write_string(FILE *out, const char *s, size_t max);

#endif
