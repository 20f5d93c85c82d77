// setupFiles of the jest project "postgres": the suites of this project run on PostgreSQL (see startApp).
process.env.TEST_DB = 'postgres'
