// The one error a channel adds: it broke under a call. Retryable by design (the next call opens
// a new channel), so it says so in its details, with a Retry-After hint for HTTP callers.
import { UpstreamError } from "../../core/errors.ts";

export class ChannelBrokenError extends UpstreamError {
  constructor(pod: string, why: string) {
    super(
      `command channel to pod ${pod} broke (${why}); the command may still be running there: list and re-attach it, or retry the call, which opens a new channel`,
      { pod, retryable: true, retryAfterSeconds: 1 },
    );
  }
}
