/** How long `waitFor` polls, and what it names when it gives up. */
export interface WaitOptions {
  /** What the test waits for, as the failure message says it ("the grant to land"). */
  readonly what: string;
  /** Give up after this long. @default 5000 */
  readonly timeoutMs?: number;
  /** Look again after this long. @default 10 */
  readonly intervalMs?: number;
}

/**
 * Polls `check` until it holds, and throws "timed out after N ms waiting for <what>" once `timeoutMs`
 * has passed: a test waits for the thing it needs, never for a fixed time that a loaded machine can
 * overrun. An error thrown by `check` (a failed assertion) fails the wait at once.
 */
export async function waitFor(check: () => boolean | Promise<boolean>, { what, timeoutMs = 5000, intervalMs = 10 }: WaitOptions): Promise<void> {
  const start = Date.now();
  while (!(await check())) {
    if (Date.now() - start > timeoutMs) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`);
    await new Promise((r) => setTimeout(r, intervalMs));
  }
}
