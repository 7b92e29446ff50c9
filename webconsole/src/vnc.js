// VNC: noVNC over virt-api's vnc websocket.
import RFB from "@novnc/novnc";
import { SUBRESOURCES, websocketUrl } from "./api.js";
import { h } from "./dom.js";

export function vncConsole(panel, namespace, name) {
  const state = h("p", { id: "vnc-state", role: "status" }, "Connecting…");
  const screen = h("div", { id: "vnc-screen", className: "vnc", "aria-label": "VNC display" });
  panel.replaceChildren(state, screen);
  const path = `${SUBRESOURCES}/namespaces/${namespace}/virtualmachineinstances/${name}/vnc`;
  const rfb = new RFB(screen, websocketUrl(path), { wsProtocols: ["plain.kubevirt.io"] });
  rfb.scaleViewport = true;
  rfb.addEventListener("connect", () => (state.textContent = "Connected"));
  rfb.addEventListener("disconnect", (e) => (state.textContent = e.detail.clean ? "Disconnected" : "Connection lost"));
  return () => rfb.disconnect();
}
