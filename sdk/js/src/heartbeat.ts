/**
 * A timer that keeps a lease alive by renewing it on a period. Both kinds of
 * lease ledgerd hands out use it: a tool call's claim while the tool runs,
 * and a router attempt while its replica generates.
 */

import { LedgerUnavailable } from "./errors.js";
import { Backoff } from "./http.js";

export class Heartbeat {
  private timer: NodeJS.Timeout | null = null;
  private inFlight: Promise<void> | null = null;
  private stopped = false;

  /**
   * `beat` renews with a single try. When ledgerd cannot be reached it is
   * tried again sooner (jittered, never later than the period), because the
   * lease keeps running meanwhile. Any other refusal means the lease is lost
   * for good (fenced, run out...): `onLost` gets the error and beating ends.
   */
  constructor(private readonly intervalMs: number, private readonly beat: () => Promise<unknown>,
              private readonly onLost: (e: unknown) => void) {
    if (!(intervalMs > 0)) throw new RangeError("a heartbeat needs a positive interval");
  }

  /** Starts beating; the first beat comes one interval from now. */
  start(): void {
    this.schedule(this.intervalMs, new Backoff());
  }

  /** Started, and neither stopped nor ended by a refusal. */
  get running(): boolean {
    return this.timer !== null || this.inFlight !== null;
  }

  /** Stops beating; resolves once no beat is in flight any more. */
  async stop(): Promise<void> {
    this.stopped = true;
    if (this.timer !== null) clearTimeout(this.timer);
    this.timer = null;
    await this.inFlight;
  }

  private schedule(delayMs: number, backoff: Backoff): void {
    // unref: a forgotten heartbeat does not keep the process alive.
    this.timer = setTimeout(() => {
      this.timer = null;
      this.inFlight = this.once(backoff).finally(() => { this.inFlight = null; });
    }, delayMs).unref();
  }

  private async once(backoff: Backoff): Promise<void> {
    try {
      await this.beat();
      if (!this.stopped) this.schedule(this.intervalMs, new Backoff());
    } catch (e) {
      if (this.stopped) return;
      if (e instanceof LedgerUnavailable) {
        this.schedule(Math.min(this.intervalMs, backoff.nextDelay()), backoff);
      } else {
        this.stopped = true;
        this.onLost(e);
      }
    }
  }
}
