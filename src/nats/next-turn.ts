/**
 * One shared turn of the event loop. Handlers of `runEach` that end together (their timers or
 * replies landed in one phase of the loop) settle together after it: their final frames are
 * published in one run of microtasks, so the client writes them to the socket at once, where
 * each would otherwise take a write (a system call) of its own before the next could start.
 */

let pending: Promise<void> | undefined;

/**
 * Resolves in the check phase of this turn of the event loop (`setImmediate`); every caller
 * until then shares it. Not unref'd: a frame owed waits for it, and it lasts one turn.
 */
export function nextTurn(): Promise<void> {
  return (pending ??= new Promise<void>((resolve) => {
    setImmediate(() => {
      pending = undefined;
      resolve();
    });
  }));
}
