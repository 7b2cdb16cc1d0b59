"""Validates an in-toto statement carrying an SLSA provenance v1 with the in-toto
attestation library (PyPI in-toto-attestation, pinned in requirements.txt), not with
sandbox-matrix's own reader.

    validate_provenance.py STATEMENT.json

The statement is parsed into the library's Statement proto and the predicate into its
SLSA provenance v1 proto, both strictly (an unknown field, or a value of the wrong type,
such as a timestamp that is not RFC 3339, is refused); Statement.validate() and each
ResourceDescriptor's validate() run; and the fields SLSA provenance v1 requires are
checked: buildDefinition.buildType and runDetails.builder.id are URIs, and
externalParameters is set. Prints `valid` and exits 0, or prints why and exits 1.
"""

import json
import sys
from urllib.parse import urlparse

from google.protobuf import json_format
from in_toto_attestation.predicates.provenance.v1 import provenance_pb2
from in_toto_attestation.v1 import statement_pb2
from in_toto_attestation.v1.resource_descriptor import ResourceDescriptor
from in_toto_attestation.v1.statement import Statement

SLSA_PROVENANCE_V1 = "https://slsa.dev/provenance/v1"


def is_uri(text: str) -> bool:
    parsed = urlparse(text)
    return bool(parsed.scheme) and bool(parsed.netloc or parsed.path)


def validate(document: dict) -> None:
    statement = Statement.copy_from_pb(
        json_format.ParseDict(document, statement_pb2.Statement())
    )
    statement.validate()
    if statement.pb.predicate_type != SLSA_PROVENANCE_V1:
        raise ValueError(f"predicateType is {statement.pb.predicate_type!r}")
    provenance = json_format.ParseDict(
        document["predicate"], provenance_pb2.Provenance()
    )
    definition = provenance.build_definition
    if not is_uri(definition.build_type):
        raise ValueError(f"buildDefinition.buildType {definition.build_type!r} is not a URI")
    if len(definition.external_parameters) == 0:
        raise ValueError("buildDefinition.externalParameters is empty")
    for dependency in definition.resolved_dependencies:
        ResourceDescriptor.copy_from_pb(dependency).validate()
    builder = provenance.run_details.builder
    if not is_uri(builder.id):
        raise ValueError(f"runDetails.builder.id {builder.id!r} is not a URI")


def main() -> int:
    with open(sys.argv[1], encoding="utf-8") as file:
        document = json.load(file)
    try:
        validate(document)
    except (ValueError, json_format.ParseError) as error:
        print(f"invalid: {error}")
        return 1
    print("valid")
    return 0


if __name__ == "__main__":
    sys.exit(main())
