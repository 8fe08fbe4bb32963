// A channel over a local `sbx-helper channel DIR` child process instead of a pod exec: the same
// binary and daemon, without a cluster. For unit tests of the protocol.
import { spawn } from "node:child_process";
import type { ChannelTransport } from "./channel.ts";

export function localChannelTransport(helper: string, dir: string): ChannelTransport & { pid: number } {
  const child = spawn(helper, ["channel", dir], { stdio: ["pipe", "pipe", "inherit"] });
  child.stdin.on("error", () => undefined); // a child that died: the output's end reports it
  child.on("error", () => undefined);
  return {
    pid: child.pid ?? -1,
    output: child.stdout,
    send: (b) => void child.stdin.write(b),
    close: () => {
      child.stdin.end();
      child.kill("SIGKILL");
    },
  };
}
