// The serial console: xterm.js over virt-api's console websocket (plain.kubevirt.io, raw bytes both ways).
import { Terminal } from "@xterm/xterm";
import "@xterm/xterm/css/xterm.css";
import { SUBRESOURCES, websocketUrl } from "./api.js";
import { h } from "./dom.js";

export function serialConsole(panel, namespace, name) {
  const state = h("p", { id: "console-state", role: "status" }, "Connecting…");
  const screen = h("div", { id: "terminal", className: "terminal", "aria-label": "Serial console" });
  panel.replaceChildren(state, screen);
  const terminal = new Terminal({ cols: 100, rows: 30, convertEol: false, fontSize: 14 });
  terminal.open(screen);
  const path = `${SUBRESOURCES}/namespaces/${namespace}/virtualmachineinstances/${name}/console`;
  const socket = new WebSocket(websocketUrl(path), ["plain.kubevirt.io"]);
  socket.binaryType = "arraybuffer";
  const encoder = new TextEncoder();
  socket.onopen = () => {
    state.textContent = "Connected (press Enter for a prompt)";
    terminal.focus();
  };
  socket.onmessage = (event) =>
    terminal.write(typeof event.data === "string" ? event.data : new Uint8Array(event.data));
  socket.onclose = (event) => {
    state.textContent = `Disconnected${event.reason ? `: ${event.reason}` : ""}`;
  };
  const input = terminal.onData((data) => {
    if (socket.readyState === WebSocket.OPEN) socket.send(encoder.encode(data));
  });
  // The page reads the screen's text (tests and screen readers): xterm's buffer as plain lines.
  screen.dataset.ready = "true";
  window.consoleText = () => {
    const buffer = terminal.buffer.active;
    const lines = [];
    for (let i = 0; i < buffer.length; i++) lines.push(buffer.getLine(i)?.translateToString(true) || "");
    return lines.join("\n");
  };
  return () => {
    input.dispose();
    socket.close();
    terminal.dispose();
  };
}
