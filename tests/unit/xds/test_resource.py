from envoy.config.cluster.v3 import cluster_pb2
from envoy.service.discovery.v3 import discovery_pb2
from google.protobuf import wrappers_pb2

from meshplane.xds.resource import pack, type_url_of


def test_type_url_names_the_message_type_for_classes_and_instances():
    expected = "type.googleapis.com/envoy.config.cluster.v3.Cluster"
    assert type_url_of(cluster_pb2.Cluster) == expected
    assert type_url_of(cluster_pb2.Cluster(name="c")) == expected


def test_pack_versions_by_content_and_type():
    first = pack("a", wrappers_pb2.StringValue(value="x"))
    assert first.version == pack("b", wrappers_pb2.StringValue(value="x")).version
    assert len(first.version) == 16
    int(first.version, 16)
    assert first.version != pack("a", wrappers_pb2.StringValue(value="y")).version
    # Same bytes on the wire, different type: a different version.
    assert first.version != pack("a", wrappers_pb2.BytesValue(value=b"x")).version
    assert first.body.Is(wrappers_pb2.StringValue.DESCRIPTOR)


def test_wire_entries_decode_back_and_are_encoded_once():
    res = pack("c1", cluster_pb2.Cluster(name="c1"))

    sotw = discovery_pb2.DiscoveryResponse.FromString(res.sotw_entry())
    assert list(sotw.resources) == [res.body]
    delta = discovery_pb2.DeltaDiscoveryResponse.FromString(res.delta_entry())
    assert [(r.name, r.version, r.resource) for r in delta.resources] == [("c1", res.version, res.body)]
    assert res.sotw_entry() is res.sotw_entry()
    assert res.delta_entry() is res.delta_entry()
