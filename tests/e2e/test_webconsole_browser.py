"""The web console in a real browser (Debian's chromium, headless, driven by Playwright) against `pykubevirt up`
with the demo VM: log in with the token, watch the VM stop and start, type into the serial console, and see the API
server's 422 for an invalid YAML edit next to its field, and VMs created on DataVolumes imported from a URL or
uploaded from the browser. Screenshots go to tests/artifacts/webconsole/ (PYKUBEVIRT_UPDATE_SCREENSHOTS=1
also copies them to docs/screenshots/, which the README shows)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from playwright.sync_api import Browser, Page, expect, sync_playwright

from tests.e2e.conftest import UpCluster, started_up_cluster, wait_for
from tests.e2e.test_persistent_disks import loopback_file_server
from tests.paths import REPO

pytestmark = pytest.mark.e2e

CHROMIUM = "/usr/bin/chromium"
DEMO = str(REPO / "examples" / "vm-demo.yaml")
ARTIFACTS = REPO / "tests" / "artifacts" / "webconsole"
SCREENSHOTS = REPO / "docs" / "screenshots"
DESKTOP = {"width": 1280, "height": 800}
PHONE = {"width": 390, "height": 844}
# The ones the README shows (docs/screenshots/); the others stay test artifacts.
COMMITTED = frozenset({"vms", "vms-phone", "vm-overview", "serial-console", "vnc", "vm-yaml-422"})


@pytest.fixture(scope="module")
def console_cluster(tmp_path_factory: pytest.TempPathFactory, guest_image: Path) -> Iterator[UpCluster]:
    """`pykubevirt up` with the demo VM Running (its printable status, which waits for the VMI's Ready condition)."""
    with started_up_cluster(tmp_path_factory, guest_image, "webconsole") as cluster:
        cluster.run("kubectl", "apply", "-f", DEMO)
        wait_for(lambda: running(cluster), "the demo VM Running", 180)
        yield cluster


def running(cluster: UpCluster) -> bool:
    return cluster.jsonpath("vm", "demo", "{.status.printableStatus}") == "Running"


@pytest.fixture(scope="module")
def console_url(console_cluster: UpCluster) -> str:
    """The URL `up` prints (a second `up` is a no-op that prints it again)."""
    printed = console_cluster.run("pykubevirt", "up").stdout
    match = re.search(r"web console: (http://127\.0\.0\.1:\d+/)", printed)
    assert match, printed
    return match.group(1)


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    if not Path(CHROMIUM).exists():
        pytest.fail("chromium is not installed: run scripts/setup-host.sh")
    with sync_playwright() as playwright:
        # Root has no user namespaces for chromium's sandbox here; the page only ever loads the console.
        launched = playwright.chromium.launch(executable_path=CHROMIUM, headless=True, args=["--no-sandbox"])
        yield launched
        launched.close()


@pytest.fixture
def page(browser: Browser, console_url: str, console_cluster: UpCluster) -> Iterator[Page]:
    """A new browser context (no session yet), logged in through the login page."""
    context = browser.new_context(viewport=DESKTOP)
    opened = context.new_page()
    opened.goto(console_url)
    opened.get_by_label("Bearer token").fill(token(console_cluster))
    opened.get_by_role("button", name="Log in").click()
    expect(opened.get_by_role("heading", name="Virtual machines")).to_be_visible()
    yield opened
    context.close()


def token(cluster: UpCluster) -> str:
    config = yaml.safe_load(cluster.kubeconfig.read_text())
    return str(config["users"][0]["user"]["token"])


def screenshot(page: Page, name: str, *, full_page: bool = False) -> None:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    path = ARTIFACTS / f"{name}.png"
    page.screenshot(path=str(path), full_page=full_page)
    if os.environ.get("PYKUBEVIRT_UPDATE_SCREENSHOTS") and name in COMMITTED:
        SCREENSHOTS.mkdir(parents=True, exist_ok=True)
        shutil.copy(path, SCREENSHOTS / path.name)


TINY_INSTANCETYPE = """
apiVersion: instancetype.kubevirt.io/v1beta1
kind: VirtualMachineClusterInstancetype
metadata:
  name: tiny
spec:
  cpu:
    guest: 1
  memory:
    guest: 128Mi
"""

NON_BLANK_CANVAS = """() => {
  const canvas = document.querySelector("#vnc-screen canvas");
  if (!canvas || !canvas.width || !canvas.height) return false;
  const pixels = canvas.getContext("2d").getImageData(0, 0, canvas.width, canvas.height).data;
  for (let i = 4; i < pixels.length; i += 4) {
    if (pixels[i] !== pixels[0] || pixels[i + 1] !== pixels[1] || pixels[i + 2] !== pixels[2]) return true;
  }
  return false;
}"""


def test_login_and_the_live_list_follows_stop_start_pause_and_unpause(
    page: Page, console_url: str, console_cluster: UpCluster
) -> None:
    row = page.locator('tr[data-vm="default/demo"]')
    expect(row.locator('[data-field="status"]')).to_have_text("Running", timeout=30_000)
    expect(row).to_contain_text("node01")
    screenshot(page, "vms")
    page.set_viewport_size(PHONE)
    screenshot(page, "vms-phone")
    page.set_viewport_size(DESKTOP)

    row.get_by_role("button", name="Stop default/demo", exact=True).click()
    expect(row.locator('[data-field="status"]')).to_have_text("Stopped", timeout=90_000)
    row.get_by_role("button", name="Start default/demo", exact=True).click()
    expect(row.locator('[data-field="status"]')).to_have_text("Running", timeout=90_000)

    row.get_by_role("button", name="Pause default/demo", exact=True).click()
    expect(row.locator('[data-field="status"]')).to_have_text("Paused", timeout=60_000)
    row.get_by_role("button", name="Unpause default/demo", exact=True).click()
    expect(row.locator('[data-field="status"]')).to_have_text("Running", timeout=60_000)

    # Refused actions show the API's reason: the VM runs already.
    row.get_by_role("button", name="Start default/demo", exact=True).click()
    expect(page.locator("#notice")).to_contain_text("refused", timeout=15_000)
    screenshot(page, "vms-refused-action")

    page.get_by_role("link", name="Nodes").click()
    expect(page.locator('tr[data-node="node01"]')).to_contain_text("Ready")
    screenshot(page, "nodes")

    # Logged out, the list is gone and the API refuses the browser (no token in any URL or storage).
    page.get_by_role("button", name="Log out").click()
    expect(page.get_by_label("Bearer token")).to_be_visible()
    assert page.evaluate("fetch('/api/v1/namespaces').then(r => r.status)") == 401
    stored = page.evaluate("JSON.stringify([location.href, {...localStorage}, {...sessionStorage}, document.cookie])")
    assert token(console_cluster) not in stored


def test_serial_console_answers_hostname(page: Page, console_url: str, console_cluster: UpCluster) -> None:
    wait_for(lambda: running(console_cluster), "the demo VM Running", 120)
    page.goto(console_url + "#/vm/default/demo/console")
    expect(page.locator("#console-state")).to_contain_text("Connected", timeout=30_000)
    page.locator("#terminal").click()
    # The guest may still be booting after the restart: type the command until its shell answers.
    deadline = time.monotonic() + 120
    answered = False
    while time.monotonic() < deadline and not answered:
        page.keyboard.type("hostname\n")
        try:
            page.wait_for_function(
                "() => window.consoleText().split('\\n').some(line => line.trim() === 'demo')", timeout=3_000
            )
            answered = True
        except Exception:  # Playwright's TimeoutError: not booted yet, type again.
            continue
    assert answered, page.evaluate("window.consoleText()")
    screenshot(page, "serial-console")

    # VNC through the same proxy: noVNC draws the guest's screen (VGA text), so the canvas is not one colour.
    page.get_by_role("link", name="VNC").click()
    expect(page.locator("#vnc-state")).to_have_text("Connected", timeout=30_000)
    page.wait_for_function(NON_BLANK_CANVAS, timeout=30_000)
    screenshot(page, "vnc")


def test_yaml_edit_shows_the_servers_422_and_a_vm_is_created_from_an_instancetype(
    page: Page, console_url: str, console_cluster: UpCluster
) -> None:
    page.goto(console_url + "#/vm/default/demo/overview")
    expect(page.locator('[data-field="status"]')).to_have_text(re.compile(r"\S"), timeout=30_000)
    # Charts from the node's virt-handler /metrics, polled through the console with the user's token.
    expect(page.locator("#charts-state")).to_contain_text("from virt-handler on node01", timeout=60_000)
    page.wait_for_function("() => Number(document.getElementById('charts').dataset.samples || 0) >= 2", timeout=30_000)
    expect(page.locator(".facts")).to_contain_text("Run strategy")
    screenshot(page, "vm-overview", full_page=True)
    page.get_by_role("link", name="YAML").click()
    editor = page.get_by_label("VirtualMachine YAML")
    expect(editor).to_have_value(re.compile("runStrategy: Always"), timeout=15_000)
    editor.fill(editor.input_value().replace("runStrategy: Always", "runStrategy: Sometimes"))
    page.get_by_role("button", name="Save").click()
    errors = page.locator("#yaml-errors")
    expect(errors).to_contain_text("422", timeout=15_000)
    expect(errors).to_contain_text("runStrategy")
    # The cause's field is found in the text: its button selects the offending value in the editor.
    errors.get_by_role("button", name=re.compile(r"^line \d+$")).click()
    selected = "(e => e.value.slice(e.selectionStart, e.selectionEnd))(document.getElementById('yaml'))"
    assert page.evaluate(selected) == "Sometimes"
    # The cause also sits right under its field's line in the text, as a marked note ("# ⚠ ..."), the line marked too.
    lines = editor.input_value().split("\n")
    at = next(i for i, line in enumerate(lines) if line.strip() == "runStrategy: Sometimes")
    assert lines[at + 1].strip().startswith("# ⚠ ") and "runStrategy" in lines[at + 1], lines[at : at + 2]
    expect(page.locator(".yaml-layer .bad")).to_have_count(1)
    expect(page.locator(".yaml-layer .note")).to_contain_text("runStrategy")
    assert page.locator(".yaml-layer > div").count() == len(lines), "the marks layer mirrors the text line by line"
    screenshot(page, "vm-yaml-422")

    # Create a VM from a cluster instancetype, see it run, and delete it from its page.
    console_cluster.run("kubectl", "apply", "-f", "-", stdin=TINY_INSTANCETYPE)
    page.get_by_role("link", name="Create VM").click()
    page.get_by_label("Name", exact=True).fill("from-type")
    expect(page.get_by_label("Instancetype")).to_contain_text("tiny", timeout=15_000)
    page.get_by_label("Instancetype").select_option("tiny")
    page.get_by_role("button", name="Create").click()
    expect(page.get_by_role("heading", name="default/from-type")).to_be_visible(timeout=15_000)
    expect(page.locator('[data-field="status"]')).to_have_text("Running", timeout=180_000)
    screenshot(page, "created-from-instancetype")
    page.once("dialog", lambda dialog: dialog.accept())
    page.get_by_role("button", name="Delete default/from-type").click()
    wait_for(lambda: console_cluster.jsonpath("vm", "from-type", "{.metadata.name}") == "", "from-type deleted", 120)


def test_vms_created_on_a_new_datavolume_from_a_url_and_from_an_uploaded_image(
    page: Page, console_url: str, console_cluster: UpCluster, tmp_path: Path
) -> None:
    raw, qcow2 = tmp_path / "disk.raw", tmp_path / "disk.qcow2"
    raw.write_bytes(bytes(range(256)) * 4096 * 8)  # 8 MiB that are not zeros
    subprocess.run(["qemu-img", "convert", "-f", "raw", "-O", "qcow2", str(raw), str(qcow2)], check=True)
    console_cluster.run("kubectl", "apply", "-f", "-", stdin=TINY_INSTANCETYPE)

    def fill_create_form(name: str, kind: str) -> None:
        page.get_by_role("link", name="Create VM").click()
        page.get_by_label("Name", exact=True).fill(name)
        expect(page.get_by_label("Instancetype")).to_contain_text("tiny", timeout=15_000)
        page.get_by_label("Instancetype").select_option("tiny")
        page.get_by_label("Boot disk").select_option(kind)
        page.get_by_label("DataVolume size").fill("64Mi")
        page.get_by_label("Start it now").uncheck()

    # A dataVolumeTemplate importing over http, as KubeVirt's: the VM controller creates the DataVolume.
    with loopback_file_server(tmp_path) as port:
        fill_create_form("imported", "http")
        page.get_by_label("Image URL (http or https)").fill(f"http://127.0.0.1:{port}/disk.qcow2")
        page.get_by_role("button", name="Create").click()
        expect(page.get_by_role("heading", name="default/imported")).to_be_visible(timeout=15_000)
        wait_for(
            lambda: console_cluster.jsonpath("dv", "imported-rootdisk", "{.status.phase}") == "Succeeded",
            "imported-rootdisk Succeeded",
            60,
        )

    # An upload: the browser sends the file through the console to CDI's upload proxy, with a progress bar.
    fill_create_form("uploaded", "upload")
    page.get_by_label("Disk image file").set_input_files(str(qcow2))
    page.get_by_role("button", name="Create").click()
    stage = page.locator("#upload-stage")
    expect(stage).to_contain_text("Uploaded disk.qcow2", timeout=60_000)
    expect(page.locator("#upload-progress")).to_have_js_property("value", 100)
    expect(page.locator("#notice")).to_contain_text("Created default/uploaded")
    screenshot(page, "create-upload")

    # The DataVolumes page follows CDI's processing to the end.
    stage.get_by_role("link", name="DataVolumes").click()
    for name in ("imported-rootdisk", "uploaded-rootdisk"):
        row = page.locator(f'tr[data-dv="default/{name}"]')
        expect(row.locator('[data-field="phase"]')).to_have_text("Succeeded", timeout=60_000)
        expect(row.locator('[data-field="progress"]')).to_contain_text("100.0%")
        expect(row.locator("progress")).to_have_js_property("value", 100)
    screenshot(page, "datavolumes")
    console_cluster.run("kubectl", "delete", "vm", "imported", "uploaded", "--wait=false")


HALTED_POOL = """
apiVersion: pool.kubevirt.io/v1beta1
kind: VirtualMachinePool
metadata:
  name: parked
spec:
  replicas: 1
  selector:
    matchLabels: {kubevirt.io/vmpool: parked}
  virtualMachineTemplate:
    metadata:
      labels: {kubevirt.io/vmpool: parked}
    spec:
      runStrategy: Halted
      template:
        metadata:
          labels: {kubevirt.io/vmpool: parked}
        spec:
          domain:
            memory: {guest: 128Mi}
            devices: {}
"""


def test_pools_are_listed_and_scaled_from_the_console(page: Page, console_url: str, console_cluster: UpCluster) -> None:
    console_cluster.run("kubectl", "apply", "-f", "-", stdin=HALTED_POOL)
    try:
        page.get_by_role("link", name="Pools").click()
        row = page.locator('tr[data-pool="default/parked"]')
        expect(row.locator('[data-field="current"]')).to_have_text("1", timeout=30_000)
        expect(page.get_by_text("No replica sets.")).to_be_visible()

        replicas = row.get_by_label("Replicas of parked")
        replicas.fill("-1")
        row.get_by_role("button", name="Scale").click()
        expect(page.locator("#notice")).to_contain_text("must be a whole number")

        replicas.fill("3")
        row.get_by_role("button", name="Scale").click()
        expect(page.locator("#notice")).to_contain_text("Scaled parked to 3.")
        expect(row.locator('[data-field="desired"]')).to_have_text("3", timeout=15_000)
        expect(row.locator('[data-field="current"]')).to_have_text("3", timeout=30_000)
        screenshot(page, "pools")
        names = console_cluster.run("kubectl", "get", "vm", "-l", "kubevirt.io/vmpool=parked", "-o", "name").stdout
        assert names.split() == [f"virtualmachine.kubevirt.io/parked-{i}" for i in range(3)]
    finally:
        console_cluster.run("kubectl", "delete", "vmpool", "parked", "--wait=false")
