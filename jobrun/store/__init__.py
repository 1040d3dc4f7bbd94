"""The database side: connections, migrations, the embedded server. SQL text lives in
``jobrun/sql/`` as named queries; these modules run it."""
