import type { ChildProcess } from 'node:child_process';
import { rmSync } from 'node:fs';

/*
 * What must not outlive this process: child processes (killed) and temporary directories (removed)
 * when it exits, even if a caller forgot to stop them. The 'exit' handler is synchronous, as 'exit'
 * requires; it is installed once, on first use.
 */

/** Child processes killed (SIGKILL) when this process exits; delete one once it has exited. */
export const liveChildren = new Set<ChildProcess>();
/** Directories removed when this process exits; delete one once it is removed. */
export const liveDirs = new Set<string>();
let installed = false;

/** Installs the exit handler (idempotent). */
export function installExitHook(): void {
  if (installed) return;
  installed = true;
  process.on('exit', () => {
    for (const child of liveChildren) {
      try {
        child.kill('SIGKILL');
      } catch {
        // already gone
      }
    }
    for (const dir of liveDirs) rmSync(dir, { recursive: true, force: true });
  });
}
