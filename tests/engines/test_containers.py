"""Engine commands as people run them: docker/podman run wrappers, compose files, Kubernetes
manifests. Each shape follows an engine's or a platform's own documentation (the `source`
of each case); each parses to the engine, version, model, GPUs, port, /dev/shm and env."""

from __future__ import annotations

import textwrap
from dataclasses import dataclass, field

import pytest

from servepilot.engines.cmdline import parse_command, render_command
from servepilot.engines.containers import DOCKER_DEFAULT_SHM
from servepilot.engines.manifests import compose_command, manifest_command

GiB = 2**30


@dataclass
class Case:
    name: str
    source: str
    command: str | None = None  # a shell line, or
    compose: str | None = None  # a compose file's text (run as `docker compose -f FILE up`), or
    manifest: str | None = None  # a Kubernetes manifest's text (`kubectl apply -f FILE`)
    service: str | None = None
    engine: str = "vllm"
    version: str | None = None
    model: str | None = None
    host_model: str | None = None  # the model's host path through a mount
    visible: str | None = None  # the host GPUs the container sees (None: all)
    gpus: str | None = None
    port: str | None = None  # host port
    engine_port: int | None = None
    shm: int | None | str = "host"  # bytes, None (host's /dev/shm), or "host" = --ipc=host
    env: dict = field(default_factory=dict)
    options: dict = field(default_factory=dict)
    note: str | None = None  # words one of the notes must hold


CASES = [
    Case(
        "vllm-docs-docker-run-latest",
        "https://docs.vllm.ai/en/stable/deployment/docker.html",
        command="docker run --runtime nvidia --gpus all -v ~/.cache/huggingface:/root/.cache/huggingface "
        '--env "HF_TOKEN=hf_x" -p 8000:8000 --ipc=host vllm/vllm-openai:latest --model Qwen/Qwen3-0.6B',
        version=None,
        model="Qwen/Qwen3-0.6B",
        gpus="all",
        port="8000",
        env={"HF_TOKEN": "hf_x"},
        note="tag 'latest' names no vllm version",
    ),
    Case(
        "vllm-docker-run-versioned-two-gpus-shm-size",
        "https://docs.vllm.ai/en/stable/deployment/docker.html (--shm-size instead of --ipc=host)",
        command="docker run --gpus '\"device=2,3\"' --shm-size 16g -p 8001:8000 -v /data/models:/models "
        "vllm/vllm-openai:v0.16.0 --model /models/kimi-k2.5-nvfp4 --tensor-parallel-size 2",
        version="0.16.0",
        model="/models/kimi-k2.5-nvfp4",
        host_model="/data/models/kimi-k2.5-nvfp4",
        visible="2,3",
        gpus="device=2,3",
        port="8001",
        shm=16 * GiB,
        options={"tensor_parallel_size": 2},
    ),
    Case(
        "vllm-docker-run-positional-model-detached",
        "https://docs.vllm.ai/en/stable/deployment/docker.html (the image's entrypoint is `vllm serve`)",
        command="sudo docker run -d --name kimi --gpus 8 --ipc=host -p 8000:8000 -v /mnt/nvme/hf:/models "
        "-e VLLM_ATTENTION_BACKEND=TRITON_MLA vllm/vllm-openai:v0.18.0 /models/Kimi-K2.5 -tp 8 "
        "--trust-remote-code",
        version="0.18.0",
        model="/models/Kimi-K2.5",
        host_model="/mnt/nvme/hf/Kimi-K2.5",
        visible="0,1,2,3,4,5,6,7",
        gpus="8",
        port="8000",
        env={"VLLM_ATTENTION_BACKEND": "TRITON_MLA"},
        options={"tensor_parallel_size": 8, "trust_remote_code": True},
    ),
    Case(
        "podman-cdi-device",
        "https://docs.nvidia.com/datacenter/cloud-native/container-toolkit/latest/cdi-support.html "
        "(podman run --device nvidia.com/gpu=all)",
        command="podman run --rm --device nvidia.com/gpu=all --ipc=host -p 8000:8000 "
        "docker.io/vllm/vllm-openai:v0.11.0 --model meta-llama/Llama-3.1-8B-Instruct",
        version="0.11.0",
        model="meta-llama/Llama-3.1-8B-Instruct",
        gpus="nvidia.com/gpu=all",
        port="8000",
    ),
    Case(
        "vllm-entrypoint-bash",
        "https://docs.vllm.ai/en/stable/deployment/docker.html (overriding the entrypoint)",
        command="docker run --gpus all --ipc=host --entrypoint /bin/bash vllm/vllm-openai:v0.10.1 "
        "-c 'vllm serve Qwen/Qwen3-8B --port 8080 --max-model-len 32768'",
        version="0.10.1",
        model="Qwen/Qwen3-8B",
        gpus="all",
        engine_port=8080,
        options={"max_model_len": 32768},
    ),
    Case(
        "sglang-docs-docker-run",
        "https://docs.sglang.ai/get_started/install.html (Method 3: Using docker)",
        command="docker run --gpus all --shm-size 32g -p 30000:30000 -v ~/.cache/huggingface:/root/.cache/huggingface "
        '--env "HF_TOKEN=hf_y" --ipc=host lmsysorg/sglang:latest python3 -m sglang.launch_server '
        "--model-path meta-llama/Llama-3.1-8B-Instruct --host 0.0.0.0 --port 30000",
        engine="sglang",
        model="meta-llama/Llama-3.1-8B-Instruct",
        gpus="all",
        port="30000",
        engine_port=30000,
        env={"HF_TOKEN": "hf_y"},
        note="tag 'latest' names no sglang version",
    ),
    Case(
        "sglang-cuda-tag-version",
        "https://hub.docker.com/r/lmsysorg/sglang/tags (vX.Y.Z-cu129 tags)",
        command="docker run --gpus '\"device=0,1,2,3\"' --shm-size 32g -p 30000:30000 -v /models:/models "
        "lmsysorg/sglang:v0.5.9-cu129 python3 -m sglang.launch_server --model-path /models/DeepSeek-V3 "
        "--tp 4 --trust-remote-code --port 30000",
        engine="sglang",
        version="0.5.9",
        model="/models/DeepSeek-V3",
        host_model="/models/DeepSeek-V3",
        visible="0,1,2,3",
        gpus="device=0,1,2,3",
        port="30000",
        shm=32 * GiB,
        engine_port=30000,
    ),
    Case(
        "llamacpp-docs-server-cpu",
        "https://github.com/ggml-org/llama.cpp/blob/master/docs/docker.md",
        command="docker run -v /path/to/models:/models -p 8080:8080 ghcr.io/ggml-org/llama.cpp:server "
        "-m /models/7B/ggml-model-q4_0.gguf --port 8080 --host 0.0.0.0 -n 512",
        engine="llama.cpp",
        model="/models/7B/ggml-model-q4_0.gguf",
        host_model="/path/to/models/7B/ggml-model-q4_0.gguf",
        port="8080",
        shm=DOCKER_DEFAULT_SHM,
        note="the container sees no GPU",
    ),
    Case(
        "llamacpp-docs-server-cuda",
        "https://github.com/ggml-org/llama.cpp/blob/master/docs/docker.md (Docker With CUDA)",
        command="docker run -p 8080:8080 -v /path/to/models:/models --gpus all ghcr.io/ggml-org/llama.cpp:server-cuda "
        "-m /models/7B/ggml-model-q4_0.gguf --port 8080 --host 0.0.0.0 -n 512 --n-gpu-layers 1",
        engine="llama.cpp",
        model="/models/7B/ggml-model-q4_0.gguf",
        gpus="all",
        port="8080",
        shm=DOCKER_DEFAULT_SHM,
        host_model="/path/to/models/7B/ggml-model-q4_0.gguf",
    ),
    Case(
        "llamacpp-build-tag",
        "https://github.com/ggml-org/llama.cpp/pkgs/container/llama.cpp (server-cuda-bNNNN tags)",
        command="docker run --gpus all -p 9000:8080 -v /srv/gguf:/models "
        "ghcr.io/ggml-org/llama.cpp:server-cuda-b4719 -m /models/qwen3-8b-q4_k_m.gguf -c 8192 -ngl 99",
        engine="llama.cpp",
        version="4719",
        model="/models/qwen3-8b-q4_k_m.gguf",
        host_model="/srv/gguf/qwen3-8b-q4_k_m.gguf",
        gpus="all",
        port="9000",
        shm=DOCKER_DEFAULT_SHM,
    ),
    Case(
        "compose-vllm-gpu-reservation",
        "https://docs.docker.com/compose/how-tos/gpu-support/ (deploy.resources.reservations.devices)",
        compose="""
            services:
              vllm:
                image: vllm/vllm-openai:v0.16.0
                command: ["--model", "/models/kimi-k2.5-nvfp4", "--tensor-parallel-size", "8", "--trust-remote-code"]
                ports: ["8000:8000"]
                volumes: ["/data/models:/models:ro"]
                environment:
                  - NCCL_P2P_LEVEL=SYS
                ipc: host
                deploy:
                  resources:
                    reservations:
                      devices:
                        - driver: nvidia
                          count: all
                          capabilities: [gpu]
              webui:
                image: ghcr.io/open-webui/open-webui:main
            """,
        version="0.16.0",
        model="/models/kimi-k2.5-nvfp4",
        host_model="/data/models/kimi-k2.5-nvfp4",
        gpus="all",
        port="8000",
        env={"NCCL_P2P_LEVEL": "SYS"},
        options={"tensor_parallel_size": 8},
    ),
    Case(
        "compose-sglang-repo-example",
        "https://github.com/sgl-project/sglang/blob/main/docker/compose.yaml",
        compose="""
            services:
              sglang:
                image: lmsysorg/sglang:latest
                container_name: sglang
                volumes:
                  - ${HOME}/.cache/huggingface:/root/.cache/huggingface
                restart: always
                network_mode: host
                privileged: true
                environment:
                  HF_TOKEN: hf_z
                entrypoint: python3 -m sglang.launch_server
                command: --model-path meta-llama/Llama-3.1-8B-Instruct --host 0.0.0.0 --port 30000
                ulimits:
                  memlock: -1
                  stack: 67108864
                ipc: host
                deploy:
                  resources:
                    reservations:
                      devices:
                        - driver: nvidia
                          device_ids: ["0"]
                          capabilities: [gpu]
            """,
        service="sglang",
        engine="sglang",
        model="meta-llama/Llama-3.1-8B-Instruct",
        visible="0",
        gpus="device=0",
        engine_port=30000,
        env={"HF_TOKEN": "hf_z"},
    ),
    Case(
        "k8s-deployment-vllm-docs",
        "https://docs.vllm.ai/en/stable/deployment/k8s.html",
        manifest="""
            apiVersion: apps/v1
            kind: Deployment
            metadata: {name: mistral-7b, namespace: default}
            spec:
              replicas: 1
              template:
                spec:
                  volumes:
                    - name: cache-volume
                      persistentVolumeClaim: {claimName: mistral-7b}
                    - name: shm
                      emptyDir: {medium: Memory, sizeLimit: "2Gi"}
                  containers:
                    - name: mistral-7b
                      image: vllm/vllm-openai:latest
                      command: ["/bin/sh", "-c"]
                      args: ["vllm serve mistralai/Mistral-7B-Instruct-v0.3 --trust-remote-code --enable-chunked-prefill --max_num_batched_tokens 1024"]
                      env:
                        - name: HUGGING_FACE_HUB_TOKEN
                          valueFrom: {secretKeyRef: {name: hf-token-secret, key: token}}
                      ports: [{containerPort: 8000}]
                      resources:
                        limits: {cpu: "10", memory: 20G, nvidia.com/gpu: "1"}
                      volumeMounts:
                        - {mountPath: /root/.cache/huggingface, name: cache-volume}
                        - {name: shm, mountPath: /dev/shm}
            ---
            apiVersion: v1
            kind: Service
            metadata: {name: mistral-7b}
            spec: {ports: [{port: 80, targetPort: 8000}]}
            """,  # noqa: E501 - verbatim from its source
        model="mistralai/Mistral-7B-Instruct-v0.3",
        visible="0",
        gpus="1",
        port="8000",
        shm=2 * GiB,
        note="secret or field reference",
    ),
    Case(
        "k8s-statefulset-sglang-hostpath",
        "https://github.com/sgl-project/sglang/blob/main/docker/k8s-sglang-service.yaml (pod template shape)",
        manifest="""
            apiVersion: apps/v1
            kind: StatefulSet
            metadata: {name: deepseek}
            spec:
              serviceName: deepseek
              template:
                spec:
                  containers:
                    - name: sglang
                      image: lmsysorg/sglang:v0.5.9-cu129
                      command: ["python3", "-m", "sglang.launch_server"]
                      args: ["--model-path", "/models/$(MODEL_DIR)", "--tp", "8", "--port", "30000",
                             "--trust-remote-code"]
                      env: [{name: MODEL_DIR, value: DeepSeek-V3}]
                      ports: [{containerPort: 30000}]
                      resources: {limits: {nvidia.com/gpu: 8}}
                      volumeMounts:
                        - {name: models, mountPath: /models}
                        - {name: dshm, mountPath: /dev/shm}
                  volumes:
                    - {name: models, hostPath: {path: /mnt/models, type: Directory}}
                    - {name: dshm, emptyDir: {medium: Memory, sizeLimit: 32Gi}}
            """,
        engine="sglang",
        version="0.5.9",
        model="/models/DeepSeek-V3",
        host_model="/mnt/models/DeepSeek-V3",
        visible="0,1,2,3,4,5,6,7",
        gpus="8",
        port="30000",
        shm=32 * GiB,
        env={"MODEL_DIR": "DeepSeek-V3"},
    ),
    Case(
        "k8s-leaderworkerset-vllm-docs",
        "https://docs.vllm.ai/en/stable/deployment/frameworks/lws.html",
        manifest="""
            apiVersion: leaderworkerset.x-k8s.io/v1
            kind: LeaderWorkerSet
            metadata: {name: vllm}
            spec:
              replicas: 2
              leaderWorkerTemplate:
                size: 2
                restartPolicy: RecreateGroupOnPodRestart
                leaderTemplate:
                  metadata: {labels: {role: leader}}
                  spec:
                    containers:
                      - name: vllm-leader
                        image: docker.io/vllm/vllm-openai:latest
                        env: [{name: HF_TOKEN, value: hf_w}]
                        command:
                          - sh
                          - -c
                          - "bash /vllm-workspace/examples/online_serving/multi-node-serving.sh leader --ray_cluster_size=$(LWS_GROUP_SIZE);
                             python3 -m vllm.entrypoints.openai.api_server --port 8080 --model meta-llama/Meta-Llama-3.1-405B-Instruct --tensor-parallel-size 8 --pipeline_parallel_size 2"
                        resources: {limits: {nvidia.com/gpu: "8", memory: 1124Gi, ephemeral-storage: 800Gi}}
                        ports: [{containerPort: 8080}]
                        volumeMounts: [{mountPath: /dev/shm, name: dshm}]
                    volumes:
                      - name: dshm
                        emptyDir: {medium: Memory, sizeLimit: 15Gi}
                workerTemplate:
                  spec:
                    containers:
                      - name: vllm-worker
                        image: docker.io/vllm/vllm-openai:latest
                        command: [sh, -c, "bash /vllm-workspace/examples/online_serving/multi-node-serving.sh worker --ray_address=$(LWS_LEADER_ADDRESS)"]
            """,  # noqa: E501 - verbatim from its source
        model="meta-llama/Meta-Llama-3.1-405B-Instruct",
        visible="0,1,2,3,4,5,6,7",
        gpus="8",
        port="8080",
        engine_port=8080,
        shm=15 * GiB,
        env={"HF_TOKEN": "hf_w"},
        options={"tensor_parallel_size": 8, "pipeline_parallel_size": 2},
        note="LeaderWorkerSet",
    ),
    Case(
        "kserve-inferenceservice-custom-container",
        "https://kserve.github.io/website/latest/modelserving/v1beta1/custom/custom_model/ (predictor containers)",
        manifest="""
            apiVersion: serving.kserve.io/v1beta1
            kind: InferenceService
            metadata: {name: llama3-vllm}
            spec:
              predictor:
                containers:
                  - name: kserve-container
                    image: vllm/vllm-openai:v0.8.5
                    command: ["python3", "-m", "vllm.entrypoints.openai.api_server"]
                    args: ["--port", "8080", "--model", "/mnt/models", "--served-model-name", "llama3"]
                    env: [{name: STORAGE_URI, value: "hf://meta-llama/Meta-Llama-3-8B-Instruct"}]
                    resources: {limits: {nvidia.com/gpu: "1"}}
                    volumeMounts: [{name: models, mountPath: /mnt/models}]
                volumes:
                  - {name: models, hostPath: {path: /var/lib/models/llama3}}
            """,
        version="0.8.5",
        model="/mnt/models",
        host_model="/var/lib/models/llama3",
        visible="0",
        gpus="1",
        engine_port=8080,
        shm=DOCKER_DEFAULT_SHM,
        env={"STORAGE_URI": "hf://meta-llama/Meta-Llama-3-8B-Instruct"},
        note="no emptyDir mounted at /dev/shm",
    ),
    Case(
        "k8s-pod-llamacpp-select-container",
        "https://github.com/ggml-org/llama.cpp/blob/master/docs/docker.md (server-cuda image as a pod)",
        manifest="""
            apiVersion: v1
            kind: Pod
            metadata: {name: llama}
            spec:
              containers:
                - name: proxy
                  image: nginx:1.27
                - name: server
                  image: ghcr.io/ggml-org/llama.cpp:server-cuda
                  args: ["-m", "/models/qwen3-8b-q4_k_m.gguf", "--port", "8080", "-ngl", "99"]
                  resources: {limits: {nvidia.com/gpu: 1}}
                  volumeMounts: [{name: m, mountPath: /models}]
              volumes: [{name: m, hostPath: {path: /srv/gguf}}]
            """,
        service="server",
        engine="llama.cpp",
        model="/models/qwen3-8b-q4_k_m.gguf",
        host_model="/srv/gguf/qwen3-8b-q4_k_m.gguf",
        visible="0",
        gpus="1",
        shm=DOCKER_DEFAULT_SHM,
    ),
]


def _parse(case: Case, tmp_path):
    if case.compose is not None:
        path = tmp_path / "compose.yaml"
        path.write_text(textwrap.dedent(case.compose))
        return parse_command(compose_command(str(path), case.service))
    if case.manifest is not None:
        path = tmp_path / "manifest.yaml"
        path.write_text(textwrap.dedent(case.manifest))
        return parse_command(manifest_command(str(path), case.service))
    return parse_command(case.command)


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_real_world_container_shapes(case: Case, tmp_path):
    assert case.source.startswith("https://")
    launch = _parse(case, tmp_path)
    c = launch.shell.container
    assert c is not None
    assert launch.engine == case.engine and c.engine == case.engine
    assert c.version == case.version
    assert launch.model == case.model
    if case.host_model:
        assert c.host_path(launch.model) == case.host_model
    assert c.gpus == case.gpus and c.visible_devices == case.visible
    assert c.host_port == case.port
    if case.engine_port is not None:
        assert launch.port == case.engine_port
    if case.shm == "host":
        assert c.ipc_host and c.shm_bytes is None
    else:
        assert c.shm_bytes == case.shm
    for k, v in case.env.items():
        assert c.env[k] == v
    for k, v in case.options.items():
        assert launch.options[k] == v
    if case.note:
        assert any(case.note in n for n in c.notes), c.notes
    # The command is kept as written: the wrapper comes first, the engine's words after it.
    words = c.words(launch.argv)
    assert words[: len(c.wrapper)] == list(c.wrapper)


def test_a_changed_flag_renders_inside_the_same_docker_run(tmp_path):
    from servepilot.engines.cmdline import with_options

    launch = parse_command("docker run --gpus all --ipc=host -p 8000:8000 vllm/vllm-openai:v0.16.0 "
                           "--model /models/k -tp 8 --kv-cache-dtype auto", engine_version="0.16.0")
    changed = with_options(launch, {"kv_cache_dtype": "bfloat16"})
    assert render_command(changed) == ("docker run --gpus all --ipc=host -p 8000:8000 vllm/vllm-openai:v0.16.0 "
                                       "--model /models/k -tp 8 --kv-cache-dtype bfloat16")
    assert changed.argv[:2] == ("vllm", "serve")  # the image's entrypoint, parsed but not written


def test_deployment_reads_the_checkpoint_from_the_host_mount_and_the_version_from_the_tag(tmp_path, capsys):
    import json
    import shutil
    from pathlib import Path

    from servepilot.cli.main import main

    example = Path(__file__).resolve().parents[2] / "examples" / "kimi-k2.5-nvfp4"
    shutil.copytree(example, tmp_path / "models" / "kimi")
    code = main(["check", "--gpu", "rtx-pro-6000x8", "--json", "--", "docker", "run", "--gpus", "all",
                 "-v", f"{tmp_path / 'models'}:/models", "vllm/vllm-openai:v0.16.0", "--model", "/models/kimi",
                 "-tp", "8", "--trust-remote-code"])
    out = json.loads(capsys.readouterr().out)
    assert code == 1 and out["verdict"] == "fail"
    codes = {f["code"] for f in out["findings"]}
    assert "SP-ATTN-001" in codes  # the image's 0.16.0 on SM120, as in the README
    assert "SP-SHM-001" in codes  # no --ipc=host / --shm-size: Docker's 64 MiB /dev/shm for 8 ranks


def test_compose_option_and_service_choice(tmp_path, capsys):
    import json
    import shutil
    from pathlib import Path

    from servepilot.cli.main import main

    example = Path(__file__).resolve().parents[2] / "examples" / "kimi-k2.5-nvfp4"
    shutil.copytree(example, tmp_path / "models" / "kimi-k2.5-nvfp4")
    path = tmp_path / "compose.yaml"
    path.write_text(textwrap.dedent(CASES[10].compose).replace("/data/models", str(tmp_path / "models")))
    assert main(["deployment", "--gpu", "h100x8", "--compose", str(path), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["engine"] == "vllm" and out["engine_version"] == "0.16.0"
    assert out["engine_version_source"] == "image" and out["container"]["runtime"] == "compose"
    assert out["container"]["command"] == ["docker", "compose", "-f", str(path), "up"]
    assert out["spec"]["family"] == "deepseek_v3"  # read from the host side of the volume
    assert main(["deployment", "--gpu", "h100x8", "--compose", str(path), "--service", "webui"]) == 2
    assert "no service of the compose file runs" in capsys.readouterr().err


def test_manifest_with_two_engines_asks_for_one(tmp_path, capsys):
    from servepilot.cli.main import main

    text = textwrap.dedent(CASES[12].manifest)
    path = tmp_path / "m.yaml"
    path.write_text(text + "---\n" + text.replace("mistral-7b", "other"))
    assert main(["deployment", "--gpu", "h100", "--manifest", str(path)]) == 2
    assert "--service NAME" in capsys.readouterr().err
    assert main(["deployment", "--gpu", "h100", "--manifest", str(path), "--service", "other"]) == 0


def test_launch_runs_the_container_command_as_written(tmp_path):
    from servepilot.runs.integration import build_launch_command

    line = ("docker run --gpus all --ipc=host -p 8000:8000 vllm/vllm-openai:v0.16.0 "
            "--model Qwen/Qwen3-8B --max-model-len 4096")
    cmd = build_launch_command([line], "h100", None, None, force=False)
    assert list(cmd.argv) == ["docker", "run", "--gpus", "all", "--ipc=host", "-p", "8000:8000",
                              "vllm/vllm-openai:v0.16.0", "--model", "Qwen/Qwen3-8B", "--max-model-len", "4096"]
    assert cmd.engine == "vllm" and cmd.engine_version == "0.16.0"


@pytest.mark.parametrize("case", [CASES[2], CASES[12]], ids=["docker-run-detached", "k8s-deployment"])
def test_launch_refuses_what_it_cannot_supervise(case, tmp_path):
    from servepilot.errors import BadInput

    launch = _parse(case, tmp_path)
    with pytest.raises(BadInput) as info:
        _ = launch.run_argv
    assert ("nothing to supervise" in info.value.problem) or ("Kubernetes cluster" in info.value.problem)


@pytest.mark.parametrize("text, kubernetes, expected", [
    ("16g", False, 16 * GiB), ("512m", False, 512 * 2**20), ("1073741824", False, GiB),
    ("16Gi", True, 16 * GiB), ("16G", True, 16 * 10**9), ("500Mi", True, 500 * 2**20), ("lots", False, None),
    ("2P", False, 2 * 2**50), ("1GB", False, GiB),
    # Kubernetes is case-sensitive: "m" is milli, not mega; "16g" is no quantity at all
    ("500m", True, 0), ("128k", True, 128_000), ("1Ei", True, 2**60), ("16g", True, None),
])
def test_sizes_in_docker_and_kubernetes_units(text, kubernetes, expected):
    from servepilot.engines.containers import parse_size

    assert parse_size(text, kubernetes=kubernetes) == expected


def test_a_shell_script_inside_the_container_runs_whole():
    """`IMAGE bash -c 'setup && VAR=1 vllm serve ... > log'`: launch runs the script as written,
    its setup, environment and redirections included, not the engine words alone."""
    script = ("pip install -q foo && VLLM_USE_V1=1 vllm serve /models/k --max-model-len 4096 "
              "> /logs/engine.log 2>&1")
    line = f"docker run --gpus all --ipc=host vllm/vllm-openai:v0.16.0 bash -c '{script}'"
    launch = parse_command(line, engine_version="0.16.0")
    assert launch.argv[:3] == ("vllm", "serve", "/models/k")
    run = launch.run_argv
    assert run[:-1] == ("docker", "run", "--gpus", "all", "--ipc=host", "vllm/vllm-openai:v0.16.0",
                        "bash", "-c")
    assert "pip install -q foo" in run[-1] and "VLLM_USE_V1=1" in run[-1]
    assert "> /logs/engine.log 2>&1" in run[-1]


@pytest.mark.parametrize("value, visible, count", [
    # docker/cli opts/gpus.go: a bare field is the count; device= lists ids (quoted when several)
    ("all", None, None), ("2", "0,1", 2), ("count=2", "0,1", 2), ("count=all", None, None),
    ('"device=0,1"', "0,1", 2), ("device=3", "3", 1), ("driver=nvidia,count=4", "0,1,2,3", 4),
    # neither a count nor devices: Docker asks for one GPU
    ("capabilities=compute", "0", 1),
])
def test_docker_gpu_requests_read_as_docker_reads_them(value, visible, count):
    from servepilot.engines.containers import gpu_selection

    assert gpu_selection(value) == (visible, count)


@pytest.mark.parametrize("value", ["count=two", "gpu=0"])
def test_a_gpu_request_docker_refuses_is_bad_input(value):
    from servepilot.engines.containers import gpu_selection
    from servepilot.errors import BadInput

    with pytest.raises(BadInput, match="--gpus"):
        gpu_selection(value)


def test_several_device_flags_add_up():
    line = ("podman run --device nvidia.com/gpu=0 --device nvidia.com/gpu=1 --ipc=host "
            "vllm/vllm-openai:v0.16.0 --model /models/k -tp 2")
    launch = parse_command(line, engine_version="0.16.0")
    c = launch.shell.container
    assert (c.visible_devices, c.gpu_count) == ("0,1", 2)


def test_an_unreadable_shm_size_is_bad_input_not_the_hosts_shm():
    from servepilot.errors import BadInput

    with pytest.raises(BadInput, match="--shm-size 'big'"):
        parse_command("docker run --gpus all --shm-size big vllm/vllm-openai:v0.16.0 --model /m",
                      engine_version="0.16.0")
