// The OCF resource agent API's exit codes (OCF RA API 1.1, section "Return
// codes"). `tandem ha agent <action>` exits with these, so the shell agent
// passes them through unchanged.

export const Ocf = {
  success: 0,
  errGeneric: 1,
  errArgs: 2,
  errUnimplemented: 3,
  errPerm: 4,
  errInstalled: 5,
  errConfigured: 6,
  notRunning: 7,
  runningPromoted: 8,
  failedPromoted: 9,
} as const;
export type OcfCode = (typeof Ocf)[keyof typeof Ocf];

const names: Record<number, string> = {
  0: 'OCF_SUCCESS',
  1: 'OCF_ERR_GENERIC',
  2: 'OCF_ERR_ARGS',
  3: 'OCF_ERR_UNIMPLEMENTED',
  4: 'OCF_ERR_PERM',
  5: 'OCF_ERR_INSTALLED',
  6: 'OCF_ERR_CONFIGURED',
  7: 'OCF_NOT_RUNNING',
  8: 'OCF_RUNNING_PROMOTED',
  9: 'OCF_FAILED_PROMOTED',
};

export const ocfName = (code: number): string => names[code] ?? `rc=${code}`;

/** What an action ends with: an OCF code and, when it is a failure, the one line the operator sees. */
export interface OcfResult {
  code: OcfCode;
  reason?: string;
}

export const ok = (): OcfResult => ({ code: Ocf.success });

/** Thrown inside an action to end it with a code and a reason (becomes ocf_exit_reason). */
export class OcfError extends Error {
  constructor(
    readonly ocfCode: OcfCode,
    message: string,
  ) {
    super(message);
    this.name = 'OcfError';
  }
}

export const fail = (code: OcfCode, reason: string): OcfResult => ({ code, reason });
