// The API server through the console's proxy: the session cookie authenticates, X-Console marks our own requests.

export class ApiError extends Error {
  constructor(code, status) {
    super((status && status.message) || `the API server answered ${code}`);
    this.code = code;
    this.status = status || {};
  }
}

export async function request(method, path, body, contentType = "application/json") {
  const headers = { Accept: "application/json", "X-Console": "1" };
  if (body !== undefined) headers["Content-Type"] = contentType;
  const reply = await fetch(path, {
    method,
    headers,
    body: body === undefined ? undefined : JSON.stringify(body),
    credentials: "same-origin",
  });
  const text = await reply.text();
  let parsed = {};
  try {
    parsed = text ? JSON.parse(text) : {};
  } catch {
    parsed = { message: text };
  }
  if (!reply.ok) {
    if (reply.status === 401 && path !== "/console/login") window.dispatchEvent(new Event("console:logged-out"));
    throw new ApiError(reply.status, parsed);
  }
  return parsed;
}

export const get = (path) => request("GET", path);

// A list followed by a watch from its resourceVersion; onChange gets the whole current map after each event.
// Relists when the watch ends (timeout, 410 Gone); stop() ends it for good.
export function listWatch(path, onChange, onError) {
  const items = new Map();
  let stopped = false;
  let controller = null;
  const key = (o) => `${o.metadata.namespace || ""}/${o.metadata.name}`;

  async function loop() {
    while (!stopped) {
      try {
        const list = await get(path);
        items.clear();
        for (const item of list.items || []) items.set(key(item), item);
        onChange(items);
        controller = new AbortController();
        const sep = path.includes("?") ? "&" : "?";
        const url = `${path}${sep}watch=1&allowWatchBookmarks=true&resourceVersion=${list.metadata.resourceVersion}`;
        const reply = await fetch(url, { headers: { Accept: "application/json" }, signal: controller.signal });
        if (!reply.ok) throw new ApiError(reply.status, await reply.json().catch(() => ({})));
        const reader = reply.body.getReader();
        const decoder = new TextDecoder();
        let buffer = "";
        for (;;) {
          const { value, done } = await reader.read();
          if (done) break;
          buffer += decoder.decode(value, { stream: true });
          let newline;
          while ((newline = buffer.indexOf("\n")) >= 0) {
            const line = buffer.slice(0, newline).trim();
            buffer = buffer.slice(newline + 1);
            if (!line) continue;
            const event = JSON.parse(line);
            if (event.type === "ADDED" || event.type === "MODIFIED") items.set(key(event.object), event.object);
            else if (event.type === "DELETED") items.delete(key(event.object));
            else if (event.type === "ERROR") throw new ApiError(event.object.code, event.object);
            else continue;
            onChange(items);
          }
        }
      } catch (error) {
        if (stopped) return;
        if (error instanceof ApiError && error.code === 401) return;
        if (onError) onError(error);
        await new Promise((resolve) => setTimeout(resolve, 1000));
      }
    }
  }
  loop();
  return {
    stop() {
      stopped = true;
      if (controller) controller.abort();
    },
  };
}

export function websocketUrl(path) {
  const scheme = location.protocol === "https:" ? "wss:" : "ws:";
  return `${scheme}//${location.host}${path}`;
}

export const VM_API = "/apis/kubevirt.io/v1";
export const SUBRESOURCES = "/apis/subresources.kubevirt.io/v1";
