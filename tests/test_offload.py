"""The line an apply prints about devices that merge received frames (pure)."""

from ratelimit.kernel.offload import advice


def test_advice_names_each_device_and_the_ethtool_words_that_turn_its_features_off():
    assert advice([("eth1", ("rx-gro", "rx-gro-hw")), ("eth2", ("rx-lro",))]) == (
        "warning: received frames are merged into bigger packets on eth1 (rx-gro, rx-gro-hw), "
        "eth2 (rx-lro); the links meter each as one packet and pass it in a burst; for one packet "
        "per frame: ethtool -K eth1 gro off rx-gro-hw off; ethtool -K eth2 lro off")
