/**
 * GET `url` as the demo key `key`, the way a well-behaved client does: a 429 that says "try again
 * within the second" (Retry-After 0 with X-RateLimit-Reset-Ms — a first sight whose fast-path ask
 * missed its 1 ms deadline across the bus, or a node just back that is withheld grants for a round) is
 * retried after that wait, for up to 5 s (on a starved machine rounds run late, and asks miss again).
 * Returns the final status, or 0 when nothing answers.
 */
export async function statusAfterRetries(url: string, key: string): Promise<number> {
  const end = Date.now() + 5000;
  for (;;) {
    try {
      const res = await fetch(url, { headers: { 'x-api-key': key }, signal: AbortSignal.timeout(2000) });
      await res.body?.cancel();
      const wait = res.headers.get('x-ratelimit-reset-ms');
      if (res.status !== 429 || res.headers.get('retry-after') !== '0' || wait === null || Date.now() > end) return res.status;
      await new Promise((r) => setTimeout(r, Number(wait))); // the wait the server asked for, as a client would
    } catch {
      return 0;
    }
  }
}
