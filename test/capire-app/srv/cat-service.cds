using { sap.capire.bookshop as my } from '../db/schema';

service CatalogService {
  entity Books as projection on my.Books;
  entity Notes as projection on my.Notes;
  action submitOrder(book : Integer, quantity : Integer);
}
