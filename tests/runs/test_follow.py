from servepilot.runs.follow import MAX_SLEEP_S, MIN_SLEEP_S, LogFollower


def test_reads_only_new_bytes_and_decodes_across_chunks(tmp_path):
    path = tmp_path / "server.log"
    f = LogFollower(path)
    assert f.read_new() == ""  # not created yet
    data = "naïve → ok\n".encode()
    with open(path, "ab") as out:
        out.write(data[:3])  # cuts "ï" in half
        out.flush()
        first = f.read_new()
        out.write(data[3:])
        out.flush()
        second = f.read_new()
    assert first + second == "naïve → ok\n"
    assert "\ufffd" not in first + second
    f.close()


def test_sleep_backs_off_when_quiet_and_resets_on_data(tmp_path):
    path = tmp_path / "server.log"
    path.write_text("x\n")
    f = LogFollower(path)
    f.read_new()
    assert f.sleep_s == MIN_SLEEP_S
    for _ in range(10):
        f.read_new()
    assert f.sleep_s == MAX_SLEEP_S
    with open(path, "a") as out:
        out.write("y\n")
    assert f.read_new() == "y\n"
    assert f.sleep_s == MIN_SLEEP_S
    f.close()


def test_a_truncated_log_is_read_again_from_its_start(tmp_path):
    # `logrotate copytruncate` (or an operator's `: > server.log`) empties the file the
    # engine appends to: the follower must not wait at the old offset forever.
    log = tmp_path / "server.log"
    log.write_text("INFO loading weights\n" * 10)
    f = LogFollower(log)
    assert f.read_new().count("\n") == 10
    with open(log, "r+") as fh:
        fh.truncate(0)
    with open(log, "a") as fh:
        fh.write("ERROR CUDA out of memory\n")
    assert f.read_new() == "ERROR CUDA out of memory\n"
    f.close()
