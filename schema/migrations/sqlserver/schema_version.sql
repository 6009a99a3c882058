-- T-SQL for SQL Server 2016+ and Azure SQL. {schema} is database.schema,
-- checked to be a plain identifier ([A-Za-z_][A-Za-z0-9_]*); {jobs} and the
-- like are [schema].[table]. Each statement is sent as a batch of its own.
--
-- The schema, unless a DBA created it already. CREATE SCHEMA must be alone
-- in its batch, hence EXEC.
IF SCHEMA_ID(N'{schema}') IS NULL EXEC(N'CREATE SCHEMA [{schema}]');

IF OBJECT_ID(N'{schema_version}', N'U') IS NULL
CREATE TABLE {schema_version} (
  version     INT           NOT NULL CONSTRAINT pk_schema_version PRIMARY KEY,
  description NVARCHAR(200) NOT NULL,
  applied_at  DATETIME2(7)  NOT NULL
);
