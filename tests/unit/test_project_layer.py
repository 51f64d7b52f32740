"""A project's requirements as a layer of their own on the Ray image (images/project_layer.py, images/project/)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import images
from images import build, project_layer
from rayrig import cli

RAY_WHEELS = ("ray-2.60.0-cp311-cp311-manylinux2014_x86_64.whl", "numpy-2.4.6-cp311-cp311-manylinux_2_28_x86_64.whl")


@pytest.fixture
def reqs(tmp_path):
    path = tmp_path / "requirements.txt"
    path.write_text("# the project\nwandb==0.22.0\noptuna  # tuning\n")
    return path


@pytest.fixture
def builds(monkeypatch):
    """Every docker_build call, in order, instead of Docker: (tag, files, keyword arguments)."""
    calls: list[tuple[str, dict, dict]] = []

    def docker_build(tag, files, progress=build.silent, **kwargs):
        calls.append((tag, files, kwargs))
        return f"sha256:{tag}"

    monkeypatch.setattr(build, "docker_build", docker_build)
    monkeypatch.setattr(project_layer, "docker_build", docker_build)
    return calls


def ray_wheelhouse(tmp_path):
    folder = tmp_path / "wheelhouse"
    folder.mkdir()
    for name in RAY_WHEELS:
        (folder / name).write_bytes(b"wheel")
    return folder


def test_a_missing_requirements_file_is_named(tmp_path, builds):
    missing = tmp_path / "nope.txt"
    with pytest.raises(FileNotFoundError, match=f"requirements file {missing} does not exist"):
        project_layer.build_with_requirements("me/project:1", missing, "rayrig/ray:2.60.0")
    assert builds == []  # nothing built, not even the Ray image
    with pytest.raises(IsADirectoryError, match=f"requirements file {tmp_path} is a folder: name the file"):
        project_layer.build_with_requirements("me/project:1", tmp_path, "rayrig/ray:2.60.0")


@pytest.mark.parametrize(
    ("line", "why"),
    [("-r base.txt", "refers to another file"), ("--constraint=c.txt", "refers to another file"),
     ("-e .", "refers to another file"), ("./mypkg", "local folder"), ("file:///src/pkg", "local folder")],
)  # fmt: skip
def test_requirements_the_build_context_cannot_hold_are_refused_with_their_line(tmp_path, line, why):
    path = tmp_path / "requirements.txt"
    path.write_text(f"wandb\n{line}\n")
    with pytest.raises(ValueError, match=rf"{path} line 2: '{line}' .*{why}"):
        project_layer.read_requirements(path)


def test_a_requirements_file_that_lists_nothing_is_refused(tmp_path):
    path = tmp_path / "requirements.txt"
    path.write_text("# nothing yet\n\n--index-url https://pypi.example/simple\n")
    with pytest.raises(ValueError, match=f"requirements file {path} lists no requirement"):
        project_layer.read_requirements(path)


def test_the_project_context_is_its_dockerfile_script_and_the_requirements(reqs):
    files = project_layer.project_context(reqs.read_bytes())
    assert set(files) == {"Dockerfile", "install-project.sh", "requirements.txt"}
    assert files["requirements.txt"] == reqs.read_bytes()
    dockerfile = files["Dockerfile"].decode()
    required = {line.split()[1] for line in dockerfile.splitlines() if line.startswith("ARG ") and "=" not in line}
    assert required == {"RAY_IMAGE"}
    stages = [line for line in dockerfile.splitlines() if line.startswith("FROM ")]
    assert stages == ["FROM ${RAY_IMAGE} AS builder", "FROM ${RAY_IMAGE}"]
    final = dockerfile.split("FROM ${RAY_IMAGE}\n", 1)[1]
    assert "COPY --from=builder /project-layer/ /" in final and "wheelhouse" not in final


def test_changing_only_the_requirements_leaves_the_ray_build_as_it_was(tmp_path, reqs, builds):
    project_layer.build_with_requirements("me/project:1", reqs, "rayrig/ray:2.60.0", base_image="debian:bookworm")
    reqs.write_text("wandb==0.23.0\noptuna\naccelerate\n")
    project_layer.build_with_requirements("me/project:1", reqs, "rayrig/ray:2.60.0", base_image="debian:bookworm")
    (ray1, ray1_files, ray1_kw), (project1, project1_files, project1_kw), (ray2, ray2_files, ray2_kw), \
        (project2, project2_files, project2_kw) = builds  # fmt: skip
    assert ray1 == ray2 == "rayrig/ray:2.60.0" and project1 == project2 == "me/project:1"
    assert "requirements.txt" not in ray1_files
    assert (ray1_files, ray1_kw) == (ray2_files, ray2_kw)  # the same inputs: "up to date", or Docker's cache
    assert project1_kw["base_image"] == "rayrig/ray:2.60.0"
    assert project1_kw["build_args"] == {"RAY_IMAGE": "rayrig/ray:2.60.0", "OFFLINE": "0"}
    assert project2_files["requirements.txt"] == b"wandb==0.23.0\noptuna\naccelerate\n"
    assert project1_files["requirements.txt"] != project2_files["requirements.txt"]


FAMILY = sorted((Path(images.__file__).parents[1] / "examples" / "images").glob("*/requirements.txt"))
#: Dockerfile instructions that add a filesystem layer to an image.
LAYER_MAKING = ("RUN ", "COPY ", "ADD ")


def final_stage_layers(dockerfile: str) -> list[str]:
    """The instructions of the Dockerfile's last stage that add a layer (the stage's FROM excluded)."""
    last = dockerfile.rsplit("\nFROM ", 1)[1]
    return [line for line in last.splitlines()[1:] if line.startswith(LAYER_MAKING)]


def test_two_project_images_of_the_family_share_every_layer_below_their_own(builds):
    """examples/images: each project image is the Ray image's layers and one of its own, so two of them share
    every layer below their own (a host that has one pulls one layer for the other)."""
    assert {p.parent.name for p in FAMILY} >= {"train", "serve", "dev"}
    layers: dict[str, list[str]] = {}
    for requirements in FAMILY:
        project_layer.read_requirements(requirements)  # each is a requirements file the build takes
        tag = f"me/{requirements.parent.name}:1"
        project_layer.build_with_requirements(tag, requirements, "rayrig/ray:2.60.0", base_image="debian:bookworm")
        (ray_tag, ray_files, ray_kw), (project_tag, files, kw) = builds[-2:]
        assert (ray_tag, project_tag, kw["base_image"]) == ("rayrig/ray:2.60.0", tag, "rayrig/ray:2.60.0")
        assert (ray_files, ray_kw) == (builds[0][1], builds[0][2])  # the same Ray image under every project
        own = final_stage_layers(files["Dockerfile"].decode())
        assert len(own) == 1, own  # one layer of its own: the project's files, copied from the builder stage
        layers[tag] = ["rayrig/ray:2.60.0 layers", f"{tag}: {own[0]} of {files['requirements.txt'].splitlines()[-1]}"]
    serve, dev = layers["me/serve:1"], layers["me/dev:1"]
    assert serve[:-1] == dev[:-1] and serve[-1] != dev[-1]


def test_the_project_image_needs_a_tag_of_its_own(reqs, builds):
    with pytest.raises(ValueError, match="needs a tag of its own: rayrig/ray:2.60.0 is the Ray image's"):
        project_layer.build_with_requirements("rayrig/ray:2.60.0", reqs, "rayrig/ray:2.60.0")
    assert builds == []


class FakeDocker:
    """``docker image inspect`` and ``docker build`` as far as docker_build uses them: labels kept per tag."""

    def __init__(self):
        self.images: dict[str, dict] = {"rayrig/ray:2.60.0": {"Id": "sha256:ray", "Config": {"Labels": {}}}}
        self.builds: list[list[str]] = []

    def inspect(self, ref):
        return self.images.get(ref)

    def build(self, cmd, progress, prefix, **kwargs):
        self.builds.append(cmd)
        labels = dict(cmd[i + 1].split("=", 1) for i, arg in enumerate(cmd) if arg == "--label")
        self.images[cmd[cmd.index("--tag") + 1]] = {"Id": f"sha256:{len(self.builds)}", "Config": {"Labels": labels}}
        return []


def test_the_project_build_is_skipped_only_while_requirements_and_ray_image_stay_the_same(reqs, monkeypatch):
    docker = FakeDocker()
    monkeypatch.setattr(build, "docker_image_inspect", docker.inspect)
    monkeypatch.setattr(build, "stream_command", docker.build)
    shown: list[str] = []

    def project():
        return project_layer.build_project_image("me/project:1", reqs, "rayrig/ray:2.60.0", progress=shown.append)

    first = project()
    assert len(docker.builds) == 1 and "RAY_IMAGE=rayrig/ray:2.60.0" in docker.builds[0]
    assert project() == first and len(docker.builds) == 1
    assert "image me/project:1: up to date" in shown
    reqs.write_text("wandb==0.23.0\n")  # the requirements' content, not the file's name, is an input
    project()
    assert len(docker.builds) == 2
    docker.images["rayrig/ray:2.60.0"]["Id"] = "sha256:ray-rebuilt"  # a new Ray image under the same tag
    project()
    assert len(docker.builds) == 3
    project_layer.build_project_image("me/project:1", reqs, "rayrig/ray:2.60.0", force=True)
    assert len(docker.builds) == 4


def fake_pip_download(saved, downloads):
    """stream_command for ``pip download``: records the command and "downloads" ``downloads`` into --dest."""

    def run(cmd, progress, prefix, **kwargs):
        saved.append(cmd)
        dest = cmd[cmd.index("--dest") + 1]
        for name in downloads:
            (Path(dest) / name).write_bytes(b"wheel")
        return []

    return run


def test_the_project_wheelhouse_keeps_the_ray_wheelhouse_versions_and_skips_its_wheels(tmp_path, reqs, monkeypatch):
    wheelhouse = ray_wheelhouse(tmp_path)
    commands: list[list[str]] = []
    downloads = ("wandb-0.22.0-py3-none-manylinux_2_17_x86_64.whl", RAY_WHEELS[1])
    monkeypatch.setattr(project_layer, "stream_command", fake_pip_download(commands, downloads))
    dest = project_layer.build_project_wheelhouse(wheelhouse, reqs)

    assert dest == wheelhouse / "project"
    (cmd,) = commands
    constraints = cmd[cmd.index("-c") + 1]
    assert cmd[cmd.index("-r") + 1] == str(reqs)
    assert Path(constraints).read_text() == "numpy==2.4.6\nray==2.60.0\n"
    assert sorted(p.name for p in dest.glob("*.whl")) == [downloads[0]]  # numpy is the Ray wheelhouse's
    assert build._wheel_files(wheelhouse) == [wheelhouse / name for name in sorted(RAY_WHEELS)]  # not project/'s

    assert project_layer.build_project_wheelhouse(wheelhouse, reqs) == dest and len(commands) == 1
    reqs.write_text("wandb==0.23.0\n")
    project_layer.build_project_wheelhouse(wheelhouse, reqs)
    assert len(commands) == 2


def test_the_project_wheelhouse_needs_the_ray_wheelhouse_first(tmp_path, reqs, monkeypatch):
    monkeypatch.setattr(project_layer, "stream_command", lambda *a, **k: pytest.fail("no download"))
    with pytest.raises(FileNotFoundError, match="holds no wheels: make the Ray image's wheelhouse first"):
        project_layer.build_project_wheelhouse(tmp_path / "empty", reqs)


def test_an_offline_build_gives_each_image_its_own_wheels(tmp_path, reqs, builds, monkeypatch):
    wheelhouse = ray_wheelhouse(tmp_path)
    project = wheelhouse / "project"
    project.mkdir()
    (project / "wandb-0.22.0-py3-none-any.whl").write_bytes(b"wheel")
    digest = project_layer.requirements_digest(reqs.read_bytes())
    (project / project_layer.PROJECT_MARKER).write_text(json.dumps({"requirements": digest}))

    project_layer.build_with_requirements("me/project:1", reqs, "rayrig/ray:2.60.0", wheelhouse=wheelhouse)
    (_, _, ray_kw), (_, _, project_kw) = builds
    assert [w.name for w in ray_kw["wheels"]] == sorted(RAY_WHEELS) and ray_kw["build_args"]["OFFLINE"] == "1"
    assert [w.name for w in project_kw["wheels"]] == ["wandb-0.22.0-py3-none-any.whl"]
    assert project_kw["build_args"]["OFFLINE"] == "1"


def test_an_offline_build_refuses_project_wheels_made_for_other_requirements(tmp_path, reqs, builds):
    wheelhouse = ray_wheelhouse(tmp_path)
    fix = f"run `rayrig image wheelhouse {wheelhouse} --requirements FILE`"
    with pytest.raises(FileNotFoundError, match=f"has no wheels for the project's requirements: {fix}"):
        project_layer.build_with_requirements("me/project:1", reqs, "rayrig/ray:2.60.0", wheelhouse=wheelhouse)
    (wheelhouse / "project").mkdir()
    (wheelhouse / "project" / project_layer.PROJECT_MARKER).write_text(json.dumps({"requirements": "other"}))
    with pytest.raises(ValueError, match="downloaded for other requirements"):
        project_layer.build_with_requirements("me/project:1", reqs, "rayrig/ray:2.60.0", wheelhouse=wheelhouse)
    assert builds == []  # refused before the Ray image's build


def test_the_command_names_the_project_image_and_the_ray_image_under_it(reqs, monkeypatch):
    calls = []
    monkeypatch.setattr("rayrig.commands.image.build_with_requirements", lambda *a, **k: calls.append((a, k)))
    monkeypatch.setattr("rayrig.commands.image.build_image", lambda *a, **k: calls.append((a, k)))
    version = images.RAY_VERSION
    assert cli.main(["image", "build", "--requirements", str(reqs)]) == 0
    assert cli.main(["image", "build", "--requirements", str(reqs), "--tag", "me/p:1", "--ray-tag", "me/ray:1"]) == 0
    assert cli.main(["image", "build", "--extra", "numpy==2.5.0"]) == 0
    (default, _), (named, _), (ray_only, ray_kw) = calls
    assert default == (f"rayrig/project:{version}", reqs, f"rayrig/ray:{version}")
    assert named == ("me/p:1", reqs, "me/ray:1")
    assert ray_only == (f"rayrig/ray:{version}",) and ray_kw["extra_requirements"] == ["numpy==2.5.0"]


def test_a_missing_requirements_file_stops_the_wheelhouse_before_any_download(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr("rayrig.commands.image.build_wheelhouse", lambda *a, **k: pytest.fail("no download"))
    missing = tmp_path / "requirements.txt"
    with pytest.raises(SystemExit) as exited:  # argparse's usage error, while parsing
        cli.main(["image", "wheelhouse", str(tmp_path / "w"), "--requirements", str(missing)])
    assert exited.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert err.endswith(f"error: argument --requirements: requirements file {missing} does not exist")


def test_build_output_shows_the_steps_dockers_cache_answered():
    assert build._is_build_milestone(" ---> Using cache")  # the classic builder
    assert build._is_build_milestone("#7 CACHED")  # BuildKit
    assert not build._is_build_milestone("Collecting ray[default,train]==2.60.0")
