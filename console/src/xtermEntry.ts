// The console's second script, xterm.js: the terminal emulator (@xterm/xterm) and its fit addon,
// built by console/build.ts into xterm.js and loaded by terminalPanel.ts only when a terminal is
// opened. Apart from app.js because it is about twelve times the size of app.js: the list page's
// first paint does not wait for a terminal nobody opened. It hands its classes to app.js through
// one global; it holds no token and talks to nothing.
import { FitAddon } from "@xterm/addon-fit";
import { Terminal } from "@xterm/xterm";
import { XTERM_GLOBAL, type XtermModule } from "./xtermTypes.ts";

(globalThis as Record<string, unknown>)[XTERM_GLOBAL] = { Terminal, FitAddon } satisfies XtermModule;
