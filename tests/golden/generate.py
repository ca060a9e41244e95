"""Write golden encoded samples for schema versions that have none yet; never rewrites a file.

Run once when a schema version is added (``.venv/bin/python tests/golden/generate.py``), review
the new ``tests/golden/<Name>/v<N>.json`` and commit it. For version N of a record each sample
message of ``protocol_samples.SAMPLES`` is written with THAT version's writer schema and id
(fields the old schema lacks are dropped), and ``expected`` records what the newest reader
decoded from it at the time. The golden tests then keep proving, forever, that the newest reader
decodes every one of these byte strings to the same message.
"""

from __future__ import annotations

import io
import json
import sys
from pathlib import Path

import avro.io

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "unit" / "protocol"))

from protocol_samples import SAMPLES, to_jsonable  # noqa: E402

from tidemark.protocol import codec, messages  # noqa: E402
from tidemark.protocol.datum import to_datum  # noqa: E402
from tidemark.protocol.schema_ids import IDS_FILE, LocalSchemaIdTable  # noqa: E402
from tidemark.protocol.schemas import NAMESPACE, SchemaVersion, load_catalog  # noqa: E402


def encode_with(version: SchemaVersion, schema_id: int, message: object) -> bytes:
    """The wire encoding of ``message`` written with an older (or the newest) writer schema."""
    out = io.BytesIO()
    out.write(codec.wire_header(schema_id))
    # write_data, not write: the datum may carry fields this older schema does not have.
    avro.io.DatumWriter(version.physical).write_data(version.physical, to_datum(message),
                                                     avro.io.BinaryEncoder(out))
    return out.getvalue()


def main() -> int:
    catalog = load_catalog()
    assert catalog.root is not None
    table = LocalSchemaIdTable.load(catalog.root / IDS_FILE)
    ids = {(e.subject, e.version): e.id for e in table.entries}
    local = codec.Codec.local()
    written = 0
    for cls in messages.MESSAGE_TYPES:
        for version in catalog.versions(f"{NAMESPACE}.{cls.__name__}"):
            path = HERE / cls.__name__ / f"v{version.version}.json"
            if path.exists():
                continue
            schema_id = ids[(version.subject, version.version)]
            samples = []
            for message in SAMPLES[cls]:
                data = encode_with(version, schema_id, message)
                samples.append({"hex": data.hex(), "expected": to_jsonable(local.decode(data))})
            doc = {"subject": version.subject, "version": version.version, "schema_id": schema_id,
                   "fingerprint": version.fingerprint, "samples": samples}
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps(doc, indent=2) + "\n", encoding="utf-8")
            written += 1
    print(f"{written} golden file(s) written")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
