// The console's HTTP edge: bounded JSON bodies in, JSON answers and errors out, and
// the headers every answer carries. Every byte of a request is untrusted: a body
// is read only up to its limit, parsed only as JSON, and a bad one is a 4xx answer.
import type { IncomingMessage, ServerResponse } from 'node:http';
import { TandemError } from '../broker/errors.js';
import { redact, redactValue } from '../ops/secrets.js';

/** Bodies of API requests (queue settings, a login) are small; this is generous. */
export const MAX_BODY_BYTES = 64 * 1024;

/** An HTTP answer that is an error: status, a stable code, a message for a person. */
export class HttpError extends Error {
  constructor(
    readonly status: number,
    readonly code: string,
    message: string,
  ) {
    super(message);
    this.name = 'HttpError';
  }
}

/** What an error becomes on the wire; an unexpected one says only where to look. */
export function httpErrorOf(err: unknown): HttpError {
  if (err instanceof HttpError) return err;
  if (err instanceof TandemError) return new HttpError(err.consoleStatus, err.code, err.message);
  return new HttpError(500, 'TANDEM_ERR_INTERNAL', 'internal error; see the broker log');
}

/**
 * The pages' policy: nothing loaded from elsewhere. `connect` adds places the page's
 * scripts may ask (the cluster's other consoles, to follow the primary: follow.ts).
 */
export function contentSecurityPolicy(connect: string[] = []): string {
  return `default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src ${["'self'", ...connect].join(' ')}; base-uri 'none'; form-action 'self'; frame-ancestors 'none'`;
}

/** Headers on every answer: nothing framed, sniffed, cached, or loaded from elsewhere. */
export function securityHeaders(res: ServerResponse): void {
  res.setHeader('Content-Security-Policy', contentSecurityPolicy());
  res.setHeader('X-Content-Type-Options', 'nosniff');
  res.setHeader('X-Frame-Options', 'DENY');
  res.setHeader('Referrer-Policy', 'no-referrer');
  res.setHeader('Cross-Origin-Opener-Policy', 'same-origin');
  res.setHeader('Cross-Origin-Resource-Policy', 'same-origin');
}

export function sendJson(res: ServerResponse, status: number, body: unknown): void {
  // Answers carry configuration and errors: never a password (secrets.ts).
  const text = JSON.stringify(redactValue(body));
  res.writeHead(status, { 'Content-Type': 'application/json; charset=utf-8', 'Cache-Control': 'no-store', 'Content-Length': Buffer.byteLength(text) });
  res.end(text);
}

/** An answer already serialised (and redacted) as JSON. */
export function sendJsonText(res: ServerResponse, status: number, json: Buffer): void {
  res.writeHead(status, { 'Content-Type': 'application/json; charset=utf-8', 'Cache-Control': 'no-store', 'Content-Length': json.length });
  res.end(json);
}

export function sendError(res: ServerResponse, err: HttpError): void {
  if (res.headersSent) {
    res.destroy();
    return;
  }
  sendJson(res, err.status, { error: { code: err.code, message: redact(err.message) } });
}

/**
 * The request's JSON body, an object (an empty body is {}). Refused: another
 * content type (so a cross-site form cannot post here without a CORS preflight),
 * more than `limit` bytes (read no further), JSON that does not parse, or JSON that
 * is not an object.
 */
export function readJsonBody(req: IncomingMessage, limit = MAX_BODY_BYTES): Promise<Record<string, unknown>> {
  return new Promise((resolve, reject) => {
    const declared = Number(req.headers['content-length'] ?? 0);
    if (declared > limit) {
      reject(tooLarge(limit));
      req.resume();
      return;
    }
    const chunks: Buffer[] = [];
    let size = 0;
    let done = false;
    const finish = (fn: () => void) => {
      if (done) return;
      done = true;
      fn();
    };
    req.on('data', (chunk: Buffer) => {
      size += chunk.length;
      if (size > limit) {
        finish(() => reject(tooLarge(limit)));
        // Stop reading: what else the client sends is not ours to hold.
        req.removeAllListeners('data');
        req.resume();
        return;
      }
      if (!done) chunks.push(chunk);
    });
    req.on('error', (err) => finish(() => reject(new HttpError(400, 'TANDEM_ERR_INVALID_ARGUMENT', `request body unreadable: ${err.message}`))));
    req.on('end', () =>
      finish(() => {
        if (size === 0) return resolve({});
        const type = String(req.headers['content-type'] ?? '').split(';')[0]!.trim().toLowerCase();
        if (type !== 'application/json') {
          return reject(new HttpError(415, 'TANDEM_ERR_INVALID_ARGUMENT', `request bodies must be JSON (Content-Type: application/json), not '${type || 'none'}'`));
        }
        let value: unknown;
        try {
          value = JSON.parse(Buffer.concat(chunks).toString('utf8'));
        } catch (err) {
          // Not V8's message: it quotes the body ("user=alice&password=..."... is not valid JSON).
          const at = /at position (\d+)/.exec((err as Error).message)?.[1];
          return reject(new HttpError(400, 'TANDEM_ERR_INVALID_ARGUMENT', `malformed JSON in the request body${at ? ` (at position ${at})` : ''}`));
        }
        if (value === null || typeof value !== 'object' || Array.isArray(value)) {
          return reject(new HttpError(400, 'TANDEM_ERR_INVALID_ARGUMENT', 'the request body must be a JSON object'));
        }
        resolve(value as Record<string, unknown>);
      }),
    );
  });
}

function tooLarge(limit: number): HttpError {
  return new HttpError(413, 'TANDEM_ERR_BODY_TOO_LARGE', `request body over ${limit} bytes`);
}
