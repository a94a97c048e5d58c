from __future__ import annotations

import shutil

import pytest

from hopgraph.documents import Document
from tests.serve.support import SECRET_DOCUMENTS


@pytest.fixture(scope="session")
def acl_documents(sample_documents):
    """The sample corpus plus three restricted documents with codewords."""
    secrets = [
        Document(id=d["id"], title=d["title"], text=d["text"], source="test", metadata={"acl": d["acl"]})
        for d in SECRET_DOCUMENTS
    ]
    return list(sample_documents) + secrets


@pytest.fixture(scope="session")
def acl_index(tmp_path_factory, acl_documents, sample_config):
    from hopgraph.index.pipeline import build_index

    out = tmp_path_factory.mktemp("acl") / "index"
    build_index(acl_documents, out, sample_config, progress=False)
    return out


@pytest.fixture(autouse=True)
def shared_index_stays_unchanged(request):
    """A test that sends a job to the session's ``acl_index`` publishes a version every later test
    then serves (and copies): such tests take ``index_copy``. Found when tests ran in another order."""
    yield
    if "acl_index" in request.fixturenames:
        root = request.getfixturevalue("acl_index")
        assert not (root / "CURRENT").exists(), f"{request.node.name} published a version on the shared acl_index"


@pytest.fixture()
def index_copy(acl_index, tmp_path):
    """A private copy for tests that change documents."""
    target = tmp_path / "index"
    # Without what a live server over ``acl_index`` writes meanwhile (its heartbeat, the leader
    # record, their temporary files): a file renamed away during the copy failed it.
    shutil.copytree(acl_index, target, ignore=shutil.ignore_patterns("*.tmp", "replicas", "leader.json", ".leader"))
    return target


@pytest.fixture(scope="session")
def serve_config(sample_config, tmp_path_factory):
    cache = tmp_path_factory.mktemp("serve-cache")
    return sample_config.model_copy(
        update={
            # A fresh update worker per batch, as each test ends soon after its jobs (test_jobs.py covers lingering).
            "serve": sample_config.serve.model_copy(update={"rate_limit": 0.0, "worker_linger": 0.0}),
            "embedding": sample_config.embedding.model_copy(update={"cache": str(cache / "vectors.sqlite")}),
        }
    )
