// CPU, memory and network charts of one VMI, from its node's virt-handler /metrics (polled through the console
// with the user's token) and drawn with uPlot.
import uPlot from "uplot";
import "uplot/dist/uPlot.min.css";
import { h } from "./dom.js";

const POLL_MS = 5000;
const WINDOW = 60;
const SERIES = {
  cpu: "kubevirt_vmi_cpu_usage_seconds_total",
  memory: "kubevirt_vmi_memory_used_bytes",
  // Without the balloon's guest-side statistics "used" is 0: the QEMU process's resident memory stands in.
  resident: "kubevirt_vmi_memory_resident_bytes",
  rx: "kubevirt_vmi_network_receive_bytes_total",
  tx: "kubevirt_vmi_network_transmit_bytes_total",
};

// Sums of each wanted family over the VMI's series (all interfaces, for network).
export function vmiSamples(text, namespace, name) {
  const sums = {};
  const wanted = new Set(Object.values(SERIES));
  for (const line of text.split("\n")) {
    const match = /^([a-zA-Z_:][\w:]*)\{([^}]*)\}\s+(\S+)/.exec(line);
    if (!match || !wanted.has(match[1])) continue;
    const labels = {};
    for (const [, key, value] of match[2].matchAll(/(\w+)="((?:[^"\\]|\\.)*)"/g)) labels[key] = value;
    if (labels.namespace !== namespace || labels.name !== name) continue;
    sums[match[1]] = (sums[match[1]] || 0) + Number.parseFloat(match[3]);
  }
  return sums;
}

export function vmCharts(panel, namespace, name, node) {
  const state = h("p", { id: "charts-state", role: "status" }, "Collecting metrics…");
  const boxes = {
    cpu: h("figure", { className: "chart", "aria-label": "CPU usage (cores)" }),
    memory: h("figure", { className: "chart", "aria-label": "Memory (MiB)" }),
    net: h("figure", { className: "chart", "aria-label": "Network (KiB/s)" }),
  };
  panel.append(h("h2", {}, "Metrics"), state, h("div", { className: "charts" }, Object.values(boxes)));
  const width = () => Math.max(260, Math.min(420, panel.clientWidth - 16));
  const make = (box, title, labels) =>
    new uPlot(
      { title, width: width(), height: 160, series: [{}, ...labels.map((label, i) => ({ label, stroke: ["#0a58ca", "#d63384"][i] }))] },
      [[], ...labels.map(() => [])],
      box,
    );
  const plots = {
    cpu: make(boxes.cpu, "CPU (cores)", ["cpu"]),
    memory: make(boxes.memory, "Memory (MiB)", ["memory"]),
    net: make(boxes.net, "Network (KiB/s)", ["rx", "tx"]),
  };
  const data = { t: [], cpu: [], memory: [], rx: [], tx: [] };
  let previous = null;
  let stopped = false;

  async function poll() {
    if (stopped) return;
    try {
      const reply = await fetch(`/console/nodes/${encodeURIComponent(node)}/metrics`);
      if (!reply.ok) throw new Error(`metrics: ${reply.status} ${(await reply.text()).slice(0, 200)}`);
      const sums = vmiSamples(await reply.text(), namespace, name);
      const now = Date.now() / 1000;
      if (sums[SERIES.cpu] === undefined) {
        state.textContent = "No metrics for this VM on its node yet.";
      } else {
        if (previous) {
          const dt = now - previous.t;
          const rate = (key) => Math.max(0, ((sums[SERIES[key]] || 0) - (previous.sums[SERIES[key]] || 0)) / dt);
          data.t.push(now);
          data.cpu.push(rate("cpu"));
          data.memory.push((sums[SERIES.memory] || sums[SERIES.resident] || 0) / 1048576);
          data.rx.push(rate("rx") / 1024);
          data.tx.push(rate("tx") / 1024);
          for (const key of Object.keys(data)) if (data[key].length > WINDOW) data[key].shift();
          plots.cpu.setData([data.t, data.cpu]);
          plots.memory.setData([data.t, data.memory]);
          plots.net.setData([data.t, data.rx, data.tx]);
          state.textContent = `Every ${POLL_MS / 1000}s from virt-handler on ${node}`;
          panel.dataset.samples = String(data.t.length);
        }
        previous = { t: now, sums };
      }
    } catch (error) {
      state.textContent = error.message;
    }
    if (!stopped) timer = setTimeout(poll, previous && data.t.length === 0 ? 1000 : POLL_MS);
  }
  let timer = setTimeout(poll, 0);
  return () => {
    stopped = true;
    clearTimeout(timer);
    Object.values(plots).forEach((p) => p.destroy());
  };
}
