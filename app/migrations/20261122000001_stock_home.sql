-- Where each product's live stock is kept (see `Home`): `row` is the `stock` column above;
-- the other homes keep it elsewhere and leave `stock` at 0.
ALTER TABLE products ADD COLUMN home VARCHAR(16) NOT NULL DEFAULT 'row';
