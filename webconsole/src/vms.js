// The VMs page: every VirtualMachine with its instance's node and IP, kept current by watches.
import { listWatch, VM_API } from "./api.js";
import { actionButtons } from "./actions.js";
import { age, h, notify } from "./dom.js";

function cpuMemory(vm) {
  const domain = vm.spec?.template?.spec?.domain || {};
  const instancetype = vm.spec?.instancetype?.name;
  if (instancetype) return [instancetype, ""];
  const cpu = domain.cpu || {};
  const cores = (cpu.cores || 1) * (cpu.sockets || 1) * (cpu.threads || 1);
  const memory = domain.memory?.guest || domain.resources?.requests?.memory || "";
  return [String(cores), memory];
}

export function vmsPage(root) {
  let vms = new Map();
  let vmis = new Map();
  const body = h("tbody");
  const table = h(
    "table",
    { className: "vms", "aria-label": "Virtual machines" },
    h(
      "thead",
      {},
      h("tr", {}, ["Name", "Namespace", "Status", "Node", "IP", "CPU", "Memory", "Age", "Actions"].map((t) => h("th", { scope: "col" }, t))),
    ),
    body,
  );
  const empty = h("p", { className: "empty" }, "Loading…");
  root.replaceChildren(h("h1", {}, "Virtual machines"), empty, h("div", { className: "table-scroll" }, table));

  function render() {
    empty.textContent = vms.size ? "" : "No virtual machines.";
    body.replaceChildren(
      ...[...vms.values()]
        .sort((a, b) => `${a.metadata.namespace}/${a.metadata.name}`.localeCompare(`${b.metadata.namespace}/${b.metadata.name}`))
        .map((vm) => {
          const key = `${vm.metadata.namespace}/${vm.metadata.name}`;
          const vmi = vmis.get(key);
          const status = vm.status?.printableStatus || "";
          const [cpu, memory] = cpuMemory(vm);
          const ip = (vmi?.status?.interfaces || []).map((i) => i.ipAddress).filter(Boolean)[0] || "";
          return h(
            "tr",
            { "data-vm": key },
            h("td", {}, h("a", { href: `#/vm/${vm.metadata.namespace}/${vm.metadata.name}` }, vm.metadata.name)),
            h("td", {}, vm.metadata.namespace),
            h("td", { className: `status status-${status}`, "data-field": "status" }, status),
            h("td", {}, vmi?.status?.nodeName || ""),
            h("td", {}, ip),
            h("td", {}, cpu),
            h("td", {}, memory),
            h("td", {}, age(vm.metadata.creationTimestamp)),
            h("td", {}, actionButtons(vm, ["Start", "Stop", "Restart", "Pause", "Unpause"])),
          );
        }),
    );
  }
  const onError = (error) => notify(`watch: ${error.message}`);
  const watches = [
    listWatch(`${VM_API}/virtualmachines`, (items) => ((vms = items), render()), onError),
    listWatch(`${VM_API}/virtualmachineinstances`, (items) => ((vmis = items), render()), onError),
  ];
  return () => watches.forEach((w) => w.stop());
}
