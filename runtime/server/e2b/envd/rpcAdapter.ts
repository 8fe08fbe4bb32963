// The Connect services as a node (req, res) handler, on our own bridge (nodeBridge.ts: less
// work per call than connect-node's). connect-node's
// connectNodeAdapter does the same but reports a response it could not finish (the client went
// away mid-stream, an everyday event for a long command) with console.error; here it goes to our
// structured log.
import type { IncomingMessage, ServerResponse } from "node:http";
import { Code, ConnectError, type ConnectRouter, type ContextValues, createConnectRouter } from "@connectrpc/connect";
import { compressionGzip } from "@connectrpc/connect-node";
import type { Logger } from "../../../core/log.ts";
import { universalRequest, writeUniversalResponse } from "./nodeBridge.ts";

export interface RpcAdapterOptions {
  routes: (router: ConnectRouter) => void;
  contextValues: (req: IncomingMessage) => ContextValues;
  readMaxBytes: number;
  logger: Logger;
}

export type RpcHandler = (req: IncomingMessage, res: ServerResponse) => void;

export function rpcAdapter(opts: RpcAdapterOptions): RpcHandler {
  const router = createConnectRouter({ acceptCompression: [compressionGzip], readMaxBytes: opts.readMaxBytes });
  opts.routes(router);
  const byPath = new Map(router.handlers.map((h) => [h.requestPath, h]));
  return (req, res) => {
    const handler = byPath.get(req.url?.split("?", 1)[0] ?? "");
    if (!handler) {
      // Connect clients read a bare 404 as `unimplemented`
      res.writeHead(404).end();
      return;
    }
    handler(universalRequest(req, res, opts.contextValues(req)))
      .then((uRes) => writeUniversalResponse(uRes, res))
      .catch((reason: unknown) => {
        const code = ConnectError.from(reason).code;
        if (code === Code.Aborted) return;
        const log = opts.logger.child({ op: "envd", rpc: `${handler.service.typeName}/${handler.method.name}` });
        if (code === Code.Canceled || res.destroyed || req.destroyed)
          log.debug({ err: reason }, "client went away before the response ended");
        else log.warn({ err: reason }, "could not finish the response");
      });
  };
}
