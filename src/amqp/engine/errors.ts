// The engine's one error: an AMQP error condition (spec 2.8.15/2.8.16 and the
// connection, session and link error tables) with a description of what was
// wrong. Whatever the decoder, the tables or the frame reader refuse is one of
// these, so a caller maps every failure to a close, end or detach with `condition`.

/** The conditions the engine answers with (spec 2.8.15 amqp-error, 2.8.16-18). */
export const Condition = {
  internalError: 'amqp:internal-error',
  notFound: 'amqp:not-found',
  decodeError: 'amqp:decode-error',
  resourceLimitExceeded: 'amqp:resource-limit-exceeded',
  notAllowed: 'amqp:not-allowed',
  invalidField: 'amqp:invalid-field',
  notImplemented: 'amqp:not-implemented',
  illegalState: 'amqp:illegal-state',
  /** 2.8.15: the smallest encoding of a performative we must send is over the peer's max-frame-size. */
  frameSizeTooSmall: 'amqp:frame-size-too-small',
  framingError: 'amqp:connection:framing-error',
  windowViolation: 'amqp:session:window-violation',
  unattachedHandle: 'amqp:session:unattached-handle',
  handleInUse: 'amqp:session:handle-in-use',
  messageSizeExceeded: 'amqp:link:message-size-exceeded',
  transferLimitExceeded: 'amqp:link:transfer-limit-exceeded',
  errantLink: 'amqp:session:errant-link',
} as const;
export type ConditionName = (typeof Condition)[keyof typeof Condition];

export class AmqpError extends Error {
  override readonly name = 'AmqpError';

  constructor(
    readonly condition: ConditionName,
    readonly description: string,
  ) {
    // No stack: these answer hostile input, which can come many times a second,
    // and capturing one costs more than the decode that failed.
    const limit = Error.stackTraceLimit;
    Error.stackTraceLimit = 0;
    super(`${condition}: ${description}`);
    Error.stackTraceLimit = limit;
  }
}

export const decodeError = (description: string): AmqpError => new AmqpError(Condition.decodeError, description);
export const invalidField = (description: string): AmqpError => new AmqpError(Condition.invalidField, description);
export const framingError = (description: string): AmqpError => new AmqpError(Condition.framingError, description);
