// The errors a user of the broker can meet, each with a stable code and a message
// that says what to do next. The catalogue is the one table of what each error
// becomes where it leaves the broker: the AMQP condition a client sees, the status
// of a $management reply, the status of the web console's HTTP answer, and the CLI's
// exit code. README.md lists it (checked by test/unit/broker/error-catalogue.test.ts).

export interface ErrorEntry {
  /** The AMQP error condition it travels as (link detach, rejected disposition). */
  condition: string;
  /** statusCode of a $management reply (500: the reply says no more than "failed"). */
  managementStatus: number;
  /** HTTP status of the web console's API; whoever reaches an operation is logged in, so not being allowed is 403 there. */
  consoleStatus: number;
  /** What `tandem` exits with when it meets the error. */
  exitCode: number;
}

export const ErrorCatalogue = {
  TANDEM_ERR_NOT_FOUND: { condition: 'amqp:not-found', managementStatus: 404, consoleStatus: 404, exitCode: 4 },
  TANDEM_ERR_ALREADY_EXISTS: { condition: 'amqp:resource-locked', managementStatus: 409, consoleStatus: 409, exitCode: 5 },
  TANDEM_ERR_INVALID_ARGUMENT: { condition: 'amqp:invalid-field', managementStatus: 400, consoleStatus: 400, exitCode: 2 },
  TANDEM_ERR_QUEUE_FULL: { condition: 'amqp:resource-limit-exceeded', managementStatus: 507, consoleStatus: 507, exitCode: 6 },
  TANDEM_ERR_RESOURCE_LOCKED: { condition: 'amqp:resource-locked', managementStatus: 500, consoleStatus: 423, exitCode: 5 },
  TANDEM_ERR_UNAUTHORIZED: { condition: 'amqp:unauthorized-access', managementStatus: 401, consoleStatus: 403, exitCode: 7 },
  TANDEM_ERR_NOT_IMPLEMENTED: { condition: 'amqp:not-implemented', managementStatus: 501, consoleStatus: 501, exitCode: 3 },
  TANDEM_ERR_PRECONDITION: { condition: 'amqp:precondition-failed', managementStatus: 412, consoleStatus: 409, exitCode: 8 },
  TANDEM_ERR_DISK_FULL: { condition: 'amqp:resource-limit-exceeded', managementStatus: 500, consoleStatus: 507, exitCode: 9 },
  TANDEM_ERR_MEMORY_FULL: { condition: 'amqp:resource-limit-exceeded', managementStatus: 500, consoleStatus: 507, exitCode: 9 },
  TANDEM_ERR_TRANSACTION: { condition: 'amqp:transaction:rollback', managementStatus: 500, consoleStatus: 500, exitCode: 10 },
  TANDEM_ERR_INTERNAL: { condition: 'amqp:internal-error', managementStatus: 500, consoleStatus: 500, exitCode: 1 },
  /** A DR queue served by the other site of its pair: retry there (the message names it). */
  TANDEM_ERR_DR_MOVED: { condition: 'amqp:link:redirect', managementStatus: 500, consoleStatus: 409, exitCode: 11 },
} as const satisfies Record<string, ErrorEntry>;

export type ErrorCode = keyof typeof ErrorCatalogue;

export function isErrorCode(code: unknown): code is ErrorCode {
  return typeof code === 'string' && Object.hasOwn(ErrorCatalogue, code);
}

/**
 * The error a $management reply's status names: the one error that has that status,
 * or TANDEM_ERR_INTERNAL when none or several do (500). 403, AMQP Management's
 * "forbidden", is read as 401: tandem does not send it, a management node of another
 * kind may.
 */
export function errorOfManagementStatus(status: number): ErrorCode {
  const wanted = status === 403 ? 401 : status;
  const codes = (Object.keys(ErrorCatalogue) as ErrorCode[]).filter((c) => ErrorCatalogue[c].managementStatus === wanted);
  return codes.length === 1 ? codes[0]! : 'TANDEM_ERR_INTERNAL';
}

/**
 * The error an AMQP condition names (a refused attach, a detach): the one error that
 * travels as it, or the first of several that share an exit code (amqp:resource-locked);
 * TANDEM_ERR_INTERNAL for a condition no error of ours has, or several with different
 * exit codes (amqp:resource-limit-exceeded: a full queue, disk or memory).
 */
export function errorOfCondition(condition: string | undefined): ErrorCode {
  const codes = (Object.keys(ErrorCatalogue) as ErrorCode[]).filter((c) => ErrorCatalogue[c].condition === condition);
  if (codes.length === 0) return 'TANDEM_ERR_INTERNAL';
  return codes.every((c) => ErrorCatalogue[c].exitCode === ErrorCatalogue[codes[0]!].exitCode) ? codes[0]! : 'TANDEM_ERR_INTERNAL';
}

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

  get managementStatus(): number {
    return ErrorCatalogue[this.code].managementStatus;
  }

  get consoleStatus(): number {
    return ErrorCatalogue[this.code].consoleStatus;
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
