// The console's JSON API (docs/console.md), with the session's CSRF token on every
// change. Errors come back as ApiError with the server's code and message.

export class ApiError extends Error {
  constructor(
    readonly status: number,
    readonly code: string,
    message: string,
  ) {
    super(message);
  }
}

let csrfToken = '';

export function setCsrf(token: string): void {
  csrfToken = token;
}

export async function api<T = unknown>(method: 'GET' | 'POST' | 'DELETE', path: string, body?: unknown): Promise<T> {
  const headers: Record<string, string> = { Accept: 'application/json' };
  if (method !== 'GET') headers['X-CSRF-Token'] = csrfToken;
  if (body !== undefined) headers['Content-Type'] = 'application/json';
  const res = await fetch(path, { method, headers, body: body === undefined ? undefined : JSON.stringify(body), credentials: 'same-origin', cache: 'no-store' });
  const text = await res.text();
  let data: unknown = undefined;
  try {
    data = text ? JSON.parse(text) : undefined;
  } catch {
    throw new ApiError(res.status, 'TANDEM_ERR_BAD_ANSWER', `the console answered ${res.status} with something that is not JSON`);
  }
  if (!res.ok) {
    const e = (data as { error?: { code?: string; message?: string } } | undefined)?.error;
    throw new ApiError(res.status, e?.code ?? 'TANDEM_ERR_HTTP', e?.message ?? `HTTP ${res.status}`);
  }
  return data as T;
}

/** A path segment: any name, %-encoded. */
export const seg = (name: string): string => encodeURIComponent(name);
