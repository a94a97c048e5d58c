"""Uploads read by the same rules as ``hopgraph index``, with the upload form's acl on every document."""

from __future__ import annotations

from hopgraph.serve.documents import documents_of


def test_the_forms_acl_is_set_on_every_uploaded_document_whatever_a_record_says() -> None:
    records = (
        b'{"id": "open", "text": "Tide tables for Tem.", "acl": null}\n'
        b'{"id": "moved", "text": "Crane log of Tem.", "acl": "x"}\n'
        b'{"id": "nested", "text": "Pier rota.", "metadata": {"acl": ["press"]}}\n'
    )
    documents = documents_of([("batch.jsonl", records), ("note.txt", b"Harbour note.")], ["board"])
    assert {d.id: d.metadata["acl"] for d in documents} == {
        "open": ["board"],
        "moved": ["board"],
        "nested": ["board"],
        "note.txt": ["board"],
    }
    assert all("source_path" not in d.metadata for d in documents)  # no server path
    # Without a form acl, each record keeps its own (a record's null stays open).
    kept = {d.id: d.metadata.get("acl") for d in documents_of([("batch.jsonl", records)], None)}
    assert kept == {"open": None, "moved": ["x"], "nested": ["press"]}
