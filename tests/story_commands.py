"""The story's command lines as the operator typed them (../shared/story/), shared by the tests."""

# The story's second launch (msg 2121), exactly as run: ssh wrapper, env prefix, nohup, venv
# python, backslash continuations, redirection, `&` and an echo tail inside the quotes.
STORY_SSH = """ssh root@10.1.230.174 'NCCL_PROTO=LL NCCL_P2P_LEVEL=SYS nohup /root/ml-env/bin/python3 -m vllm.entrypoints.openai.api_server \\
    --model /shared/kimi-k2.5-nvfp4 \\
    --tensor-parallel-size 8 \\
    --tool-call-parser kimi_k2 \\
    --reasoning-parser kimi_k2 \\
    --trust-remote-code \\
    --kv-cache-dtype auto \\
    --port 8000 \\
    --disable-log-requests \\
    > /tmp/vllm_kimi2.log 2>&1 &
echo "PID: $!"'"""  # noqa: E501 - verbatim from its source

# The first attempt (msg 2116): a pkill/sleep/rm prefix on the same line.
# (The story's first line ends in "; " before the newline: kept exactly.)
STORY_PKILL = (
    'pkill -9 -f "python3.*vllm" 2>/dev/null; sleep 3; rm -f /dev/shm/psm_* /dev/shm/sem.mp-*; \n'
    + """NCCL_PROTO=LL NCCL_P2P_LEVEL=SYS nohup /root/ml-env/bin/python3 -m vllm.entrypoints.openai.api_server \\
    --model /shared/kimi-k2.5-nvfp4 \\
    --tensor-parallel-size 8 \\
    --tool-call-parser kimi_k2 \\
    --reasoning-parser kimi_k2 \\
    --trust-remote-code \\
    --kv-cache-dtype auto \\
    --port 8000 \\
    --disable-log-requests \\
    > /tmp/vllm_kimi.log 2>&1 &
"""
)
