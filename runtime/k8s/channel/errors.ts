// The one error a channel adds: it broke under a call. Retryable by design (the next call opens
// a new channel), so it is a 503 with Retry-After to HTTP callers (code "unavailable") and its
// details say retryable, for callers that read the frame of a stream already under way.
import { UnavailableError } from "../../core/errors.ts";

export class ChannelBrokenError extends UnavailableError {
  constructor(pod: string, why: string) {
    super(
      `command channel to pod ${pod} broke (${why}); the command may still be running there: list and re-attach it, or retry the call, which opens a new channel`,
      1,
      { pod },
    );
  }
}
