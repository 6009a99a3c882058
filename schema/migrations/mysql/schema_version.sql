-- MySQL 8.0+ and MariaDB 10.6+. Every time is a DATETIME(6) in UTC.
CREATE TABLE IF NOT EXISTS slotpoller_schema_version (
  version     INT          NOT NULL PRIMARY KEY,
  description VARCHAR(200) NOT NULL,
  applied_at  DATETIME(6)  NOT NULL
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;
