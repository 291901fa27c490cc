"""stableline.testing.BrokerProcess: a broker that cannot start says why, first."""

from __future__ import annotations

import pytest

from stableline.testing import BrokerExited, BrokerProcess


def test_a_broker_refused_its_data_dir_raises_broker_exited_with_the_reason(broker, tmp_path):
    # The same data dir under another name (a symlink), its files beside the link.
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "data").symlink_to(broker.data_dir)
    second = BrokerProcess(tmp_path / "other" / "data")
    with pytest.raises(BrokerExited) as exited:
        second.start()
    assert exited.value.returncode == 2
    first_line = str(exited.value).splitlines()[0]
    assert first_line == (
        f"broker exited with 2 before 'ready': Error: data dir "
        f"{broker.data_dir.resolve()} is in use by pid {broker.process.pid}; "
        f"stop that broker or pass another --data-dir"
    )
    assert broker.admin("/admin/v2/persistent/public/default") == []  # the first serves on
