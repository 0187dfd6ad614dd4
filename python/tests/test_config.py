"""Config: KBMOD's key names from dicts, keywords and YAML, back to a dict, with the core's errors."""

import pickle

import pytest

import shiftstack


def test_defaults_and_keys():
    c = shiftstack.Config()
    d = c.to_dict()
    assert d["lh_level"] == 7.0 and d["num_obs"] == 10 and d["encode_num_bytes"] == -1
    assert d["generator_config"]["name"] == "VelocityGridSearch"
    assert set(c.keys()) == set(d) and "lh_level" in c and c["cluster_type"] == "all"
    assert "lh_level" in shiftstack.Config.default_text()


def test_dict_keywords_and_dotted_keys():
    grid = {"name": "VelocityGridSearch", "vx_steps": 41, "min_vx": -20, "max_vx": 20, "vy_steps": 5,
            "min_vy": -1, "max_vy": 1}
    c = shiftstack.Config({"generator_config": grid, "lh_level": 6.5}, num_obs=7, encode_num_bytes=2)
    d = c.to_dict()
    assert d["generator_config"]["vx_steps"] == 41 and d["lh_level"] == 6.5 and d["num_obs"] == 7
    assert c.encoding == "fp16"
    c2 = c.replace(**{"generator_config.vy_steps": 9}, sigmaG_lims=[15, 85])
    assert c2["generator_config"]["vy_steps"] == 9 and c2["generator_config"]["vx_steps"] == 41
    assert c2["sigmaG_lims"] == [15, 85]
    # numpy values and integral floats are what users pass
    np = pytest.importorskip("numpy")
    c3 = shiftstack.Config(num_obs=np.int64(5), stamp_radius=7.0, lh_level=np.float32(6.25))
    assert c3["num_obs"] == 5 and c3["stamp_radius"] == 7 and c3["lh_level"] == 6.25


def test_round_trips_through_dict_yaml_and_pickle(tmp_path):
    c = shiftstack.Config(lh_level=5.5, cluster_eps=3, x_pixel_bounds=[10, 90], shift_mode="fractional")
    assert shiftstack.Config(c.to_dict()) == c
    assert pickle.loads(pickle.dumps(c)) == c
    yaml_text = "lh_level: 5.5\ncluster_eps: 3\nx_pixel_bounds: [10, 90]\nshift_mode: fractional\n"
    assert shiftstack.Config.from_yaml(yaml_text) == c
    path = tmp_path / "search.yaml"
    path.write_text(yaml_text)
    assert shiftstack.Config.load(str(path)) == c
    assert c.shifts == "fractional"


def test_errors_are_the_cores_messages():
    with pytest.raises(shiftstack.Error, match=r"unknown key 'lh_levle' \(did you mean 'lh_level'\?\)"):
        shiftstack.Config(lh_levle=3)
    with pytest.raises(shiftstack.Error, match="KBMOD key 'results_per_pixel' is not supported"):
        shiftstack.Config(results_per_pixel=8)
    with pytest.raises(shiftstack.Error, match="config key num_obs: expected an integer, got '2.5'"):
        shiftstack.Config(num_obs=2.5)
    with pytest.raises(shiftstack.Error, match="encode_num_bytes"):
        shiftstack.Config(encode_num_bytes=3)
    with pytest.raises(shiftstack.Error, match="not valid YAML"):
        shiftstack.Config.from_yaml("lh_level: [1,")
    with pytest.raises(ValueError, match="expected None, a bool, number, string, list or dict"):
        shiftstack.Config(lh_level=object())
    assert issubclass(shiftstack.Error, RuntimeError) and issubclass(shiftstack.Cancelled, shiftstack.Error)
