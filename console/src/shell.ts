// What every page shares: where it draws, and how it shows an error (the API's own code and
// message, as text).
import { ApiError } from "./api.ts";

export interface PageContext {
  root: HTMLElement;
}

export function fail(el: HTMLElement, err: unknown): void {
  el.textContent =
    err instanceof ApiError
      ? `${err.status} ${err.code}: ${err.message}`
      : `error: ${err instanceof Error ? err.message : String(err)}`;
}
