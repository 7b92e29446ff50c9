// Create a VM from a cluster instancetype and preference, booting a containerDisk or an existing DataVolume.
import { get, request, VM_API } from "./api.js";
import { h, notify } from "./dom.js";

const INSTANCETYPES = "/apis/instancetype.kubevirt.io/v1beta1";

function field(id, label, control, help) {
  return h("div", { className: "field" }, h("label", { for: id }, label), control, help ? h("p", { className: "help", id: `${id}-help` }, help) : null);
}

export function createPage(root) {
  const name = h("input", { id: "vm-name", required: true, pattern: "[a-z0-9]([-a-z0-9]*[a-z0-9])?", autocomplete: "off" });
  const namespace = h("input", { id: "vm-namespace", value: "default", required: true });
  const instancetype = h("select", { id: "vm-instancetype", required: true });
  const preference = h("select", { id: "vm-preference" }, h("option", { value: "" }, "(none)"));
  const sourceKind = h("select", { id: "vm-source-kind" }, h("option", { value: "containerDisk" }, "containerDisk image"), h("option", { value: "dataVolume" }, "existing DataVolume"));
  const source = h("input", { id: "vm-source", required: true, value: "pykubevirt.local/demo-guest:1.0" });
  const running = h("input", { id: "vm-running", type: "checkbox", checked: true });
  const errors = h("div", { id: "create-errors", className: "form-error", role: "alert" });
  const form = h(
    "form",
    { className: "create", onsubmit: submit },
    field("vm-name", "Name", name),
    field("vm-namespace", "Namespace", namespace),
    field("vm-instancetype", "Instancetype", instancetype, "A VirtualMachineClusterInstancetype: CPU and memory."),
    field("vm-preference", "Preference", preference),
    field("vm-source-kind", "Boot disk", sourceKind),
    field("vm-source", "Image or DataVolume name", source),
    h("div", { className: "field" }, h("label", { for: "vm-running" }, running, " Start it now")),
    h("button", { type: "submit" }, "Create"),
    errors,
  );
  root.replaceChildren(h("h1", {}, "Create a virtual machine"), form);

  Promise.all([get(`${INSTANCETYPES}/virtualmachineclusterinstancetypes`), get(`${INSTANCETYPES}/virtualmachineclusterpreferences`)])
    .then(([types, preferences]) => {
      instancetype.replaceChildren(...(types.items || []).map((t) => h("option", { value: t.metadata.name }, t.metadata.name)));
      preference.append(...(preferences.items || []).map((p) => h("option", { value: p.metadata.name }, p.metadata.name)));
      if (!(types.items || []).length) errors.textContent = "No cluster instancetypes exist yet.";
    })
    .catch((error) => (errors.textContent = error.message));

  async function submit(event) {
    event.preventDefault();
    errors.replaceChildren();
    const volume =
      sourceKind.value === "containerDisk"
        ? { name: "rootdisk", containerDisk: { image: source.value } }
        : { name: "rootdisk", dataVolume: { name: source.value } };
    const vm = {
      apiVersion: "kubevirt.io/v1",
      kind: "VirtualMachine",
      metadata: { name: name.value, namespace: namespace.value },
      spec: {
        runStrategy: running.checked ? "Always" : "Halted",
        instancetype: { kind: "VirtualMachineClusterInstancetype", name: instancetype.value },
        preference: preference.value ? { kind: "VirtualMachineClusterPreference", name: preference.value } : undefined,
        template: {
          spec: {
            domain: { devices: { disks: [{ name: "rootdisk", disk: {} }], interfaces: [{ name: "default", bridge: {} }] } },
            networks: [{ name: "default", pod: {} }],
            volumes: [volume],
          },
        },
      },
    };
    try {
      await request("POST", `${VM_API}/namespaces/${encodeURIComponent(namespace.value)}/virtualmachines`, vm);
      notify(`Created ${namespace.value}/${name.value}`, "ok");
      location.hash = `#/vm/${namespace.value}/${name.value}/overview`;
    } catch (error) {
      const causes = error.status?.details?.causes || [];
      errors.replaceChildren(
        h("p", {}, `${error.code || ""} ${error.message}`.trim()),
        causes.length ? h("ul", {}, causes.map((c) => h("li", {}, h("code", {}, c.field || ""), " ", c.message || ""))) : null,
      );
    }
  }
}
