"""Example jobs: the seed's access-log counts, single-stage and two-stage."""
