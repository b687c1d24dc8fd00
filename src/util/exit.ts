// Ending a CLI run without losing its output.

/**
 * process.exit() ends the process at once, and what a pipe has not taken yet (past the
 * pipe's 64 KiB) is dropped: `tandem queue list --json | jq` got a cut JSON with exit 0.
 * A write's callback runs once everything written before it has been handed to the OS,
 * so an empty write on each stream tells when it is safe to exit.
 */
export async function exitWhenFlushed(code: number): Promise<never> {
  await Promise.all([drained(process.stdout), drained(process.stderr)]);
  process.exit(code);
}

function drained(stream: NodeJS.WriteStream): Promise<void> {
  return new Promise((resolve) => {
    if (stream.destroyed || !stream.writable) resolve();
    // An error (EPIPE: the reader went away) also ends the wait: there is nobody to wait for.
    else stream.write('', () => resolve());
  });
}
