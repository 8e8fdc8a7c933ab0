# The image of compose.patroni.yaml's nodes: PostgreSQL 15 run by Patroni,
# and etcd, all from Debian 12's packages through scripts/deps.sh (the list
# tests/ha runs on). One image, three roles: the compose file runs `etcd`
# from it for the configuration store, and Patroni for each database node.
#
#   docker build -f docker/patroni.Dockerfile -t ledgerd-patroni .   (from the repository root)

FROM debian:bookworm-slim
COPY scripts/deps.sh /tmp/deps.sh
# The image has no package lists, and deps.sh fetches them only after an
# install failed: fetch them first, and drop them once used.
RUN apt-get update -q >/dev/null && /tmp/deps.sh patroni && rm -rf /var/lib/apt/lists/* /tmp/deps.sh
COPY docker/patroni.yml /etc/patroni/patroni.yml
COPY docker/patroni-post-bootstrap.sh /usr/local/bin/patroni-post-bootstrap
# Patroni, PostgreSQL and etcd all run as postgres; their data lives in its
# home, the volume of each service.
USER postgres
WORKDIR /var/lib/postgresql
EXPOSE 5432 8008
ENTRYPOINT ["patroni", "/etc/patroni/patroni.yml"]
