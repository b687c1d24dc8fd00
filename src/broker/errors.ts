// The errors a user of the broker can meet, each with a stable code, the AMQP
// condition it travels as, and a message that says what to do next.

export const ErrorCatalogue = {
  TANDEM_ERR_NOT_FOUND: { condition: 'amqp:not-found', exitCode: 4 },
  TANDEM_ERR_ALREADY_EXISTS: { condition: 'amqp:resource-locked', exitCode: 5 },
  TANDEM_ERR_INVALID_ARGUMENT: { condition: 'amqp:invalid-field', exitCode: 2 },
  TANDEM_ERR_QUEUE_FULL: { condition: 'amqp:resource-limit-exceeded', exitCode: 6 },
  TANDEM_ERR_RESOURCE_LOCKED: { condition: 'amqp:resource-locked', exitCode: 5 },
  TANDEM_ERR_UNAUTHORIZED: { condition: 'amqp:unauthorized-access', exitCode: 7 },
  TANDEM_ERR_NOT_IMPLEMENTED: { condition: 'amqp:not-implemented', exitCode: 3 },
  TANDEM_ERR_PRECONDITION: { condition: 'amqp:precondition-failed', exitCode: 8 },
  TANDEM_ERR_DISK_FULL: { condition: 'amqp:resource-limit-exceeded', exitCode: 9 },
  TANDEM_ERR_MEMORY_FULL: { condition: 'amqp:resource-limit-exceeded', exitCode: 9 },
  TANDEM_ERR_TRANSACTION: { condition: 'amqp:transaction:rollback', exitCode: 10 },
  TANDEM_ERR_INTERNAL: { condition: 'amqp:internal-error', exitCode: 1 },
  /** A DR queue served by the other site of its pair: retry there (the message names it). */
  TANDEM_ERR_DR_MOVED: { condition: 'amqp:link:redirect', exitCode: 11 },
} as const;

export type ErrorCode = keyof typeof ErrorCatalogue;

export class TandemError extends Error {
  readonly code: ErrorCode;

  constructor(code: ErrorCode, message: string, options?: ErrorOptions) {
    super(message, options);
    this.name = 'TandemError';
    this.code = code;
  }

  get condition(): string {
    return ErrorCatalogue[this.code].condition;
  }

  get exitCode(): number {
    return ErrorCatalogue[this.code].exitCode;
  }

  toJSON(): { code: ErrorCode; condition: string; message: string } {
    return { code: this.code, condition: this.condition, message: this.message };
  }
}

export const notFound = (what: string, name: string, hint = ''): TandemError =>
  new TandemError('TANDEM_ERR_NOT_FOUND', `${what} '${name}' does not exist${hint ? `; ${hint}` : ''}`);

export const invalidArgument = (message: string): TandemError =>
  new TandemError('TANDEM_ERR_INVALID_ARGUMENT', message);

export function isTandemError(err: unknown): err is TandemError {
  return err instanceof TandemError;
}
